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
    failing_tests: list[dict[str, Any]] = field(default_factory=list)  # {name, first_lines}
    landed_files: list[str] = field(default_factory=list)  # a split: the files that landed
    diff: str | None = None  # the proposal's canonical diff (build.attach_diffs reads it from the blobs)
    diff_blob: str | None = None


@dataclass
class TaskRow:
    """Every task of the queue that ran, whether it proposed a change or not."""
    node_id: str
    outcome: str  # changed | no change | failed | running
    attempts: int = 0
    proposal_id: str | None = None
    exit_code: int | None = None
    detail: str = ""


@dataclass
class ValidationRow:
    suite: str
    passed: bool
    head_ref: str
    duration_s: float | None
    proposals: list[str]  # the nodes whose proposals the validated head holds
    phase: str = "final"  # final: the whole stack; bisect: a prefix of it
    checkpoint_id: str = ""
    failing_tests: list[dict[str, Any]] = field(default_factory=list)


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
    tasks: list[TaskRow] = field(default_factory=list)
    # integration, validation and bisection drawn on the timeline's axis beside the tasks
    phases: list[Attempt] = field(default_factory=list)


def build_model(run_id: str, events: Iterable[Mapping[str, Any]]) -> ReportModel:
    """Fold event dicts (as exported: topic, ts, payload, node_id, ...) into a ReportModel."""
    from coordinator.egress.usage import model_usage

    events = list(events)
    m = ReportModel(run_id=run_id, model_usage=model_usage(events))
    t0: float | None = None
    last_ts = 0.0
    open_attempts: dict[str, dict[str, Any]] = {}
    explainer = Explainer(run_id)
    tasks: dict[str, TaskRow] = {}
    integration_span: list[float] = []
    diff_blobs: dict[str, str] = {}
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
        if topic.startswith(("integration.", "gate.", "promotion.")):
            integration_span.append(rel)
        if topic == "integration.validation_report":
            m.phases.append(_validation_bar(p, rel))
        elif topic == "integration.proposal_verified" and p.get("diff_blob"):
            diff_blobs[str(p.get("proposal_id"))] = str(p["diff_blob"])
        if topic in ("task.dispatched", *ATTEMPT_END) and ev.get("node_id"):
            _task_row(tasks, str(ev.get("node_id")), topic, p)
        if topic == "task.dispatched":
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
                               list(f.conflicts_with), list(f.hunks), list(f.failing_suites),
                               list(f.failing_tests), list(f.landed_files), None, diff_blobs.get(f.proposal_id))
                   for f in ex.proposals if ":split-" not in f.proposal_id]
    m.validations = [ValidationRow(v.suite, v.passed, v.head_ref[:12], v.duration_s,
                                   [name(x) for x in v.proposals], v.phase, v.checkpoint_id, list(v.failing_tests))
                     for v in ex.validations]
    m.tasks = sorted(tasks.values(), key=lambda t: t.node_id)
    if integration_span:
        m.phases.insert(0, Attempt(lane="integration", label="integration: verify, stack, validate, gate",
                                   start=min(integration_span), end=max(integration_span), status="integration",
                                   wave=0, order=10 ** 9))
    m.decisions = list(ex.decisions)
    m.duration_s = last_ts - (t0 or last_ts)
    m.chain_nodes, m.chain_edges = evidence_chain(m)
    return m


def _task_row(tasks: dict[str, TaskRow], node: str, topic: str, p: Mapping[str, Any]) -> None:
    """Fold one attempt event into its task's row: the last attempt decides the outcome."""
    row = tasks.setdefault(node, TaskRow(node, "running"))
    if topic == "task.dispatched":
        row.attempts += 1
        row.outcome = "running"
        return
    summary = p.get("summary") if isinstance(p.get("summary"), Mapping) else {}
    if topic == "task.completed" and p.get("outcome", "succeeded") == "succeeded":
        row.proposal_id = p.get("proposal_id") or None
        row.outcome = "changed" if row.proposal_id else "no change"
        row.exit_code = summary.get("exit_code") if isinstance(summary.get("exit_code"), int) else None
        row.detail = ""
    else:
        err = p.get("error") if isinstance(p.get("error"), Mapping) else {}
        row.outcome = "failed"
        row.detail = f"{err.get('code') or topic}: {err.get('message') or p.get('reason') or ''}".strip()


def _validation_bar(p: Mapping[str, Any], end: float) -> Attempt:
    """A validation run as a bar ending when its report was recorded; bisect steps get their own row."""
    suite = str(p.get("suite") or "?")
    phase = str(p.get("phase") or "final")
    passed = bool(p.get("passed", p.get("result") in ("pass", "passed")))
    took = float(p.get("duration_s") or 0.0)
    lane = f"bisect: {suite}" if phase == "bisect" else f"validate: {suite}"
    return Attempt(lane=lane, label=f"{phase} validation {suite} on {str(p.get('head_ref') or '')[:12]}",
                   start=max(0.0, end - took), end=end, status="passed" if passed else "failed", wave=0,
                   order=10 ** 9 + 1 + (phase == "bisect"))


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
