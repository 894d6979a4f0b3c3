"""What a run report shows, folded from the run's ledger events (pure).

The ledger is the truth: everything here is derived from event payloads, so
a report rebuilt later from the same ledger is the same report.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Mapping

from .explain import Decision, Explainer, Explanation
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
    status: str  # applied | split | dropped | ejected | rejected | awaiting_resolver | resolved | submitted | not_integrated
    why: str = ""
    parts: list[str] = field(default_factory=list)
    conflicts_with: list[str] = field(default_factory=list)
    hunks: list[str] = field(default_factory=list)
    failing_suites: list[str] = field(default_factory=list)


@dataclass
class ValidationRow:
    suite: str
    passed: bool
    head_ref: str
    duration_s: float | None
    proposals: list[str]  # the nodes whose proposals the validated head holds
    phase: str = "final"  # final: the whole stack; bisect: a prefix of it
    checkpoint_id: str = ""


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
    drc: list[dict[str, Any]] = field(default_factory=list)  # per-mask DRC task results
    decisions: list[Decision] = field(default_factory=list)  # integration, in ledger order
    wave_starts: list[float] = field(default_factory=list)  # seconds since run start
    explanation: Explanation | None = None
    model_usage: dict[str, Any] = field(default_factory=dict)  # agents' model calls (coordinator.egress.usage)


def build_model(run_id: str, events: Iterable[Mapping[str, Any]]) -> ReportModel:
    """Fold event dicts (as exported: topic, ts, payload, node_id, ...) into a ReportModel."""
    from coordinator.egress.usage import model_usage

    events = list(events)
    m = ReportModel(run_id=run_id, model_usage=model_usage(events))
    t0: float | None = None
    last_ts = 0.0
    open_attempts: dict[str, dict[str, Any]] = {}
    explainer = Explainer(run_id)
    for ev in events:
        m.event_count += 1
        explainer.feed(ev)
        topic, p = ev["topic"], ev.get("payload") or {}
        ts = _ts(ev["ts"])
        t0 = ts if t0 is None else t0
        last_ts = max(last_ts, ts)
        rel = ts - t0
        if topic == "run.started":
            m.manifest = dict(p)
        elif topic == "wave.started":
            m.waves += 1
            m.wave_starts.append(rel)
        elif topic == "task.dispatched":
            neid = p.get("node_execution_id") or ev.get("node_execution_id")
            open_attempts[neid] = {"node": ev.get("node_id"), "start": rel, "wave": m.waves,
                                   "kind": p.get("kind", "first"), "order": int(ev.get("sequence") or 0)}
        elif topic in ATTEMPT_END:
            neid = p.get("node_execution_id") or ev.get("node_execution_id")
            a = open_attempts.pop(neid, None)
            if a is not None:
                status = ATTEMPT_END[topic] or ("completed" if p.get("outcome", "succeeded") == "succeeded"
                                                else "failed")
                m.attempts.append(Attempt(lane=str(a["node"]), label=f"{neid} ({a['kind']})",
                                          start=a["start"], end=rel, status=status, wave=a["wave"],
                                          order=a["order"]))
            summary = p.get("summary") if isinstance(p.get("summary"), Mapping) else {}
            if topic == "task.completed" and "rule_counts" in summary:  # a drc.run task's result
                viol = [i for i in p.get("evidence") or [] if isinstance(i, Mapping)
                        and i.get("kind") == "drc_violations" and i.get("layout") == summary.get("layout")]
                m.drc.append({"node_id": str(ev.get("node_id")), "layout": summary.get("layout"),
                              "deck": summary.get("deck"), "markers": summary.get("marker_count"),
                              "rule_counts": dict(summary.get("rule_counts") or {}),
                              "violations_digest": viol[0].get("digest") if viol else None,
                              "crops": []})  # close-ups around markers, added by build.litho_clips
            if topic == "task.completed":
                for item in p.get("evidence") or []:
                    if isinstance(item, Mapping):
                        m.evidence.append(TaskEvidence(str(ev.get("node_id")), str(item.get("kind", "")),
                                                       dict(item)))
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
                                  end=(last_ts - (t0 or last_ts)), status="running", wave=a["wave"],
                                  order=a["order"]))
    ex = m.explanation = explainer.explanation()
    node_of = {f.proposal_id: f.node_id for f in ex.proposals}

    def name(pid: str) -> str:
        part = pid.rsplit(":split-", 1)[1] if ":split-" in pid else ""
        return node_of.get(pid.split(":split-")[0], pid) + (f" (part {part})" if part else "")

    m.proposals = [ProposalRow(f.proposal_id, f.node_id, list(f.files), f.status,
                               f.reason if f.status != "applied" or f.resolves else "", [name(x) for x in f.parts],
                               list(f.conflicts_with), list(f.hunks), list(f.failing_suites))
                   for f in ex.proposals if ":split-" not in f.proposal_id]
    m.validations = [ValidationRow(v.suite, v.passed, v.head_ref[:12], v.duration_s,
                                   [name(x) for x in v.proposals], v.phase, v.checkpoint_id)
                     for v in ex.validations]
    m.decisions = list(ex.decisions)
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
    # what blocked the promotion after the gate (a target branch that moved) is a link too
    gate_links = {str(link.get("link")) for link in m.gate.get("links", [])}
    late = [g for g in (m.explanation.gate_problems if m.explanation else []) if g.link not in gate_links]
    for g in late:
        nodes.append(ChainNode(g.link, "PromotionDecision" if g.link.startswith("target") else "Evidence",
                               g.link.partition(":")[2] or g.link, g.status))
        edges.append((g.link, "promotion"))
    if m.gate:
        # a blocked run's gate is never shown as passed, whatever stopped it
        gate_status = "passed" if m.gate.get("passed") and not late and m.status != "blocked" else (
            "failed" if not m.gate.get("passed") else "blocked")
        nodes.append(ChainNode(gate_id, "GateDecision", "gate", gate_status))
    if m.promotion or m.gate:
        status = ("promoted" if m.status == "promoted" else
                  str(m.promotion.get("outcome")) if m.promotion else "missing")
        nodes.append(ChainNode("promotion", "PromotionDecision", m.promotion.get("to_ref", "promotion"), status))
        edges.append((gate_id, "promotion"))
    for row in m.proposals:
        nid = f"proposal:{row.proposal_id}"
        nodes.append(ChainNode(nid, "PatchProposal", f"{row.node_id}", row.status))
        target = f"apply_result:{row.proposal_id}"
        if any(n.node_id == target for n in nodes):
            edges.append((nid, target))
    return nodes, edges
