"""What a run report shows, folded from the run's ledger events (pure).

The ledger is the truth: everything here is derived from event payloads, so
a report rebuilt later from the same ledger is the same report.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Mapping

from .svg import Attempt, ChainNode

ATTEMPT_END = {"task.completed": None, "task.failed": "failed", "task.timeout": "timeout",
               "task.cancelled": "cancelled", "task.lost": "failed"}


def _ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


@dataclass
class ProposalRow:
    proposal_id: str
    node_id: str
    files: list[str]
    status: str  # applied | rejected | submitted
    why: str = ""


@dataclass
class ValidationRow:
    suite: str
    passed: bool
    head_ref: str
    duration_s: float | None
    proposals: list[str]


@dataclass
class TaskEvidence:
    node_id: str
    kind: str
    data: dict[str, Any]


@dataclass
class ReportModel:
    run_id: str
    status: str = "running"
    manifest: dict[str, Any] = field(default_factory=dict)
    finished: dict[str, Any] = field(default_factory=dict)
    attempts: list[Attempt] = field(default_factory=list)
    waves: int = 0
    proposals: list[ProposalRow] = field(default_factory=list)
    validations: list[ValidationRow] = field(default_factory=list)
    chain_nodes: list[ChainNode] = field(default_factory=list)
    chain_edges: list[tuple[str, str]] = field(default_factory=list)
    gate: dict[str, Any] = field(default_factory=dict)
    promotion: dict[str, Any] = field(default_factory=dict)
    evidence: list[TaskEvidence] = field(default_factory=list)
    duration_s: float = 0.0
    event_count: int = 0
    model_usage: dict[str, Any] = field(default_factory=dict)  # agents' model calls (coordinator.egress.usage)


def build_model(run_id: str, events: Iterable[Mapping[str, Any]]) -> ReportModel:
    """Fold event dicts (as exported: topic, ts, payload, node_id, ...) into a ReportModel."""
    from coordinator.egress.usage import model_usage

    events = list(events)
    m = ReportModel(run_id=run_id, model_usage=model_usage(events))
    t0: float | None = None
    last_ts = 0.0
    open_attempts: dict[str, dict[str, Any]] = {}
    proposals: dict[str, ProposalRow] = {}
    for ev in events:
        m.event_count += 1
        topic, p = ev["topic"], ev.get("payload") or {}
        ts = _ts(ev["ts"])
        t0 = ts if t0 is None else t0
        last_ts = max(last_ts, ts)
        rel = ts - t0
        if topic == "run.started":
            m.manifest = dict(p)
        elif topic == "wave.started":
            m.waves += 1
        elif topic == "task.dispatched":
            neid = p.get("node_execution_id") or ev.get("node_execution_id")
            open_attempts[neid] = {"node": ev.get("node_id"), "start": rel, "wave": m.waves,
                                   "kind": p.get("kind", "first")}
        elif topic in ATTEMPT_END:
            neid = p.get("node_execution_id") or ev.get("node_execution_id")
            a = open_attempts.pop(neid, None)
            if a is not None:
                status = ATTEMPT_END[topic] or ("completed" if p.get("outcome", "succeeded") == "succeeded"
                                                else "failed")
                m.attempts.append(Attempt(lane=str(a["node"]), label=f"{neid} ({a['kind']})",
                                          start=a["start"], end=rel, status=status, wave=a["wave"]))
            if topic == "task.completed":
                for item in p.get("evidence") or []:
                    if isinstance(item, Mapping):
                        m.evidence.append(TaskEvidence(str(ev.get("node_id")), str(item.get("kind", "")),
                                                       dict(item)))
        elif topic == "patch.submitted":
            pid = str(p.get("proposal_id"))
            proposals.setdefault(pid, ProposalRow(pid, str(ev.get("node_id")),
                                                  list(p.get("touched_files") or []), "submitted"))
        elif topic == "integration.apply_result":
            row = proposals.get(str(p.get("proposal_id")))
            if row is not None:
                row.status = "applied" if p.get("applied") else "conflict"
                if not p.get("applied"):
                    row.why = ", ".join(p.get("conflict_summary", {}).get("files", []))[:200]
        elif topic == "integration.proposal_rejected":
            row = proposals.get(str(p.get("proposal_id")))
            if row is not None:
                row.status = "rejected"
                row.why = "; ".join(f"{r.get('code')}: {r.get('message', '')}" for r in p.get("rejections", []))[:300]
        elif topic == "integration.validation_report":
            m.validations.append(ValidationRow(
                suite=str(p.get("suite") or p.get("environment", {}).get("suite", {}).get("suite", "?")),
                passed=bool(p.get("passed", p.get("result") in ("pass", "passed"))),
                head_ref=str(p.get("head_ref", ""))[:12], duration_s=p.get("duration_s"),
                proposals=list(p.get("included_proposals") or p.get("proposal_ids") or [])))
        elif topic == "gate.computed":
            m.gate = dict(p)
        elif topic == "promotion.computed":
            m.promotion = dict(p)
        elif topic == "run.finished":
            m.finished = dict(p)
            m.status = str(p.get("status", "finished"))
    # attempts still open at the end of the ledger are shown as running
    for neid, a in open_attempts.items():
        m.attempts.append(Attempt(lane=str(a["node"]), label=f"{neid} ({a['kind']})", start=a["start"],
                                  end=(last_ts - (t0 or last_ts)), status="running", wave=a["wave"]))
    m.proposals = sorted(proposals.values(), key=lambda r: (r.node_id, r.proposal_id))
    m.duration_s = last_ts - (t0 or last_ts)
    m.chain_nodes, m.chain_edges = evidence_chain(m)
    return m


def evidence_chain(m: ReportModel) -> tuple[list[ChainNode], list[tuple[str, str]]]:
    """The promotion evidence as a graph: links of the gate decision, each with its status."""
    nodes: list[ChainNode] = []
    edges: list[tuple[str, str]] = []
    kind_of = {"stack_plan": "StackPlan", "apply_result": "ApplyResult", "validation": "ValidationReport",
               "checkpoint_ancestry": "ApplyResult", "policy": "StackPlan", "consent": "GateDecision",
               "human_gate": "GateDecision"}
    gate_id = "gate"
    for link in m.gate.get("links", []):
        name = str(link.get("link"))
        family, _, rest = name.partition(":")
        kind = kind_of.get(family, "Evidence")
        status = "present" if link.get("status") == "ok" else str(link.get("status", "missing"))
        nodes.append(ChainNode(name, kind, rest or family, status))
        edges.append((name, gate_id))
    if m.gate:
        nodes.append(ChainNode(gate_id, "GateDecision", "gate",
                               "passed" if m.gate.get("passed") else "failed"))
    if m.promotion or m.gate:
        status = "promoted" if m.status == "promoted" else ("present" if m.promotion else "missing")
        nodes.append(ChainNode("promotion", "PromotionDecision", m.promotion.get("to_ref", "promotion"), status))
        edges.append((gate_id, "promotion"))
    for row in m.proposals:
        nid = f"proposal:{row.proposal_id}"
        nodes.append(ChainNode(nid, "PatchProposal", f"{row.node_id}", row.status))
        target = f"apply_result:{row.proposal_id}"
        if any(n.node_id == target for n in nodes):
            edges.append((nid, target))
    return nodes, edges
