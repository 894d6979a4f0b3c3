"""Why a run ended as it did, folded from its ledger events (pure).

One fold serves every place a person reads the reasons: the verdict block
at the end of `dome run`, `dome status RUN_ID` (text and `--json`) and the
report page. Input: event dicts as exported (`topic`, `sequence`, `node_id`,
`payload`). Output: an `Explanation` of plain data; `verdict_lines()` is its
wording for a terminal.

A proposal's fate is the last integration decision about it:
applied, split (its parts named), dropped (the decision, the conflicting
proposal and the hunk), ejected by bisect (the failing suites), rejected at
verification, awaiting a resolver, or never integrated (the run stopped
before integration).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Mapping

STDERR_TAIL_LINES = 6
FIRST_LINES = 4  # of each failing test's output
DETAIL_CHARS = 160
NODE_SEP = "@resolve"  # a resolver task's node id: <original node>@resolve<try> (coordinator.runloop.resolver)


@dataclass
class ProposalFate:
    proposal_id: str
    node_id: str
    files: list[str] = field(default_factory=list)
    status: str = "submitted"  # applied|split|dropped|ejected|rejected|awaiting_resolver|resolved|submitted
    reason: str = ""
    decision: str | None = None  # the decision that settled it: reorder|split|drop|bisect|reject|...
    decision_id: str | None = None
    parts: list[str] = field(default_factory=list)  # split: [applied part, dropped remainder]
    landed_files: list[str] = field(default_factory=list)  # split: the files (or file hunks) that landed
    conflicts_with: list[str] = field(default_factory=list)  # node ids of proposals already on the stack
    hunks: list[str] = field(default_factory=list)  # "path hunk N" / "path"
    failing_suites: list[str] = field(default_factory=list)
    failing_tests: list[dict[str, Any]] = field(default_factory=list)  # {name, first_lines} of the failing suite
    sequence: int | None = None
    resolves: str | None = None  # a resolver's proposal: the proposal whose conflict it resolves
    resolved_by: str | None = None  # the resolver proposal that landed in this one's place


@dataclass
class Decision:
    """One integration step, in ledger order, with its reason in words."""
    sequence: int
    kind: str  # verify|reject|plan|wave|apply|reorder|split|drop|resolver|resolved|validation|bisect|eject|gate|promotion
    text: str
    proposal_id: str | None = None


@dataclass
class ValidationRun:
    sequence: int
    suite: str
    phase: str  # final (the whole stack) | bisect (a prefix of the stack)
    passed: bool
    head_ref: str
    checkpoint_id: str
    proposals: list[str]
    duration_s: float | None = None
    failing_tests: list[dict[str, Any]] = field(default_factory=list)  # {name, first_lines}


@dataclass
class FailedTask:
    node_id: str
    attempts: int
    code: str
    message: str
    stderr_tail: str = ""


@dataclass
class GateProblem:
    link: str
    status: str
    detail: str = ""


@dataclass
class Explanation:
    run_id: str
    status: str = "running"
    reason: str | None = None
    head: str | None = None
    promoted_ref: str | None = None
    target_ref: str | None = None
    gate_passed: bool | None = None  # None: no gate decision was computed
    gate_problems: list[GateProblem] = field(default_factory=list)
    failed_tasks: list[FailedTask] = field(default_factory=list)
    proposals: list[ProposalFate] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    validations: list[ValidationRun] = field(default_factory=list)
    awaiting_consent: bool = False
    consent_token_file: str | None = None
    blocked_tasks: int = 0  # tasks that never ran because a task they depend on failed
    partial: bool = False  # if_tasks_fail: promote_rest integrated the rest without some tasks
    tasks_not_landed: list[dict[str, str]] = field(default_factory=list)  # {node_id, status} of a partial run
    # proposals above low risk and the rules that raised them (integration.policy.risk_sources)
    risk_sources: list[dict[str, Any]] = field(default_factory=list)
    domain: str = ""  # the policy preset the run used
    cost: dict[str, Any] | None = None  # run.finished's CPU figures (coordinator.run_cost), None before they existed

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def not_landed(self) -> list[ProposalFate]:
        return [p for p in self.proposals if p.status not in ("applied", "submitted")]

    def verdict_lines(self, width: int = 100) -> list[str]:
        return verdict_lines(self, width)


def _items(value: Any) -> list[Any]:
    """A list field of a record; a long list the record holds as a chain of blobs
    (`{"list_chain": {...}}`, rebuilt by readers that have the blob store) reads
    as empty here, its length given by `_count`."""
    return list(value) if isinstance(value, list) else []


def _count(value: Any) -> int:
    if isinstance(value, Mapping) and isinstance(value.get("list_chain"), Mapping):
        return int(value["list_chain"].get("count") or 0)
    return len(value) if isinstance(value, list) else 0


def _failing_tests(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The failing tests a validation report's summary names (`validation.failing_tests`)."""
    summary = report.get("summary") if isinstance(report.get("summary"), Mapping) else {}
    return [dict(t) for t in _items(summary.get("failing_tests")) if isinstance(t, Mapping)]


def _short(pid: str) -> str:
    root, _, part = pid.partition(":split-")
    return (root[:15] + (f":split-{part}" if part else "")) if root.startswith("pp-") else pid


def _hunk_text(c: Mapping[str, Any]) -> str:
    path = str(c.get("path", "?"))
    if path == "*":
        return str(c.get("reason", "a required proposal"))
    return f"{path} hunk {c['hunk']}" if c.get("hunk") is not None else path


def _clip(text: str, n: int = DETAIL_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _tail(text: str, lines: int = STDERR_TAIL_LINES) -> str:
    rows = [r.rstrip() for r in str(text).splitlines() if r.strip()]
    return "\n".join(r[:200] for r in rows[-lines:])


_Obj = Mapping[str, Any]  # an event, a payload


class Explainer:
    """The fold, one event at a time: `feed(event)` returns the integration
    decisions that event adds (the live view prints them as they happen);
    `explanation()` finishes the picture."""

    def __init__(self, run_id: str) -> None:
        self.ex = Explanation(run_id=run_id)
        self.fates: dict[str, ProposalFate] = {}
        self.node_of: dict[str, str] = {}  # proposal id (root) -> node id
        self.files_of: dict[str, set[str]] = {}  # proposal id -> touched files
        self.on_stack: list[str] = []  # proposals applied, in order (after ejections: what is left)
        self.attempts: dict[str, int] = {}
        self.last_failure: dict[str, tuple[str, str, str]] = {}
        self.succeeded: set[str] = set()
        self.bisect_suites: list[str] = []  # the suites the latest bisect searched on
        self.failing_tests: dict[str, list[dict[str, Any]]] = {}  # suite -> its latest failing tests
        self.verified: list[dict[str, Any]] = []  # the proposal verdicts (their risk and its reasons)
        self.resolver_of: dict[str, str] = {}  # a resolver attempt (node_execution_id) -> the proposal it resolves

    def fate(self, pid: str) -> ProposalFate:
        root = pid.split(":split-")[0]
        f = self.fates.get(pid)
        if f is None:
            f = self.fates[pid] = ProposalFate(pid, self.node_of.get(root, ""),
                                               sorted(self.files_of.get(root, ())))
        return f

    def holders(self, path: str, pid: str) -> list[str]:
        """Proposals on the stack that touch `path` (the ones a conflict is with)."""
        root = pid.split(":split-")[0]
        return [self.node_of.get(o.split(":split-")[0], o) for o in self.on_stack
                if o.split(":split-")[0] != root and path in self.files_of.get(o.split(":split-")[0], set())]

    def feed(self, ev: Mapping[str, Any]) -> list[Decision]:
        """The decisions this event adds: its topic's handler folds it in (topics without one add nothing)."""
        handler = _HANDLERS.get(ev.get("topic"))
        if handler is None:
            return []
        n0 = len(self.ex.decisions)
        p: Mapping[str, Any] = ev.get("payload") or {}
        handler(self, ev, p, int(ev.get("sequence") or 0), ev.get("node_id") or p.get("node_id"),
                str(p.get("proposal_id") or ""))
        return self.ex.decisions[n0:]

    # -- one handler per topic ---------------------------------------------------------------
    def _on_run_started(self, ev: _Obj, p: _Obj, seq: int, node: Any, pid: str) -> None:
        self.ex.target_ref = p.get("promote_to")

    def _on_task_dispatched(self, ev: _Obj, p: _Obj, seq: int, node: Any, pid: str) -> None:
        if not node:
            return
        self.attempts[node] = self.attempts.get(node, 0) + 1

    def _on_task_end(self, ev: _Obj, p: _Obj, seq: int, node: Any, pid: str) -> None:
        """A task attempt ended: a success (maybe a resolver with nothing left to do) or why it did not."""
        if not node:
            return
        if ev.get("topic") == "task.completed" and p.get("outcome") == "succeeded":
            self.succeeded.add(node)
            resolves = self.resolver_of.get(str(ev.get("node_execution_id") or p.get("node_execution_id")))
            if resolves and NODE_SEP in node and not p.get("proposal_id"):
                o = self.fate(resolves)
                o.status, o.decision, o.sequence = "resolved", "resolver", seq
                o.reason = f"resolver {node} found nothing left to do on the integration head"
                self.ex.decisions.append(Decision(seq, "resolved", f"{o.node_id or _short(o.proposal_id)}: {o.reason}",
                                                  o.proposal_id))
            return
        err = p.get("error") if isinstance(p.get("error"), Mapping) else {}
        details = err.get("details") if isinstance(err.get("details"), Mapping) else {}
        code = str(err.get("code") or {"task.timeout": "TIMEOUT", "task.lost": "LOST"}.get(ev.get("topic"), "FAILED"))
        message = str(err.get("message") or p.get("reason") or "")
        self.last_failure[node] = (code, message, str(details.get("stderr_tail") or p.get("stderr_tail") or ""))

    def _on_patch_submitted(self, ev: _Obj, p: _Obj, seq: int, node: Any, pid: str) -> None:
        if not pid:
            return
        self.node_of[pid] = str(node or "")
        self.files_of[pid] = set(p.get("touched_files") or [])
        self.fate(pid)

    def _on_integration_proposal_verified(self, ev: _Obj, p: _Obj, seq: int, node: Any, pid: str) -> None:
        if not pid:
            return
        self.node_of.setdefault(pid, str(p.get("node_id") or node or ""))
        self.files_of[pid] = set(p.get("touched_files") or self.files_of.get(pid, ()))
        f = self.fate(pid)
        f.node_id, f.files = self.node_of[pid], sorted(self.files_of[pid])
        res = p.get("resolves") if isinstance(p.get("resolves"), Mapping) else {}
        f.resolves = str(res.get("origin_proposal_id") or "") or None
        what = (f" (resolver of {self.fate(f.resolves).node_id or _short(f.resolves)}, conflict decision "
                f"{res.get('conflict_decision')})" if f.resolves else "")
        self.ex.decisions.append(Decision(seq, "verify", f"{f.node_id}: proposal verified{what}", pid))
        self.verified.append({**p, "node_id": f.node_id})

    def _on_wave_started(self, ev: _Obj, p: _Obj, seq: int, node: Any, pid: str) -> None:
        if not (p.get("base_source") == "integration_head"):
            return
        self.ex.decisions.append(Decision(seq, "wave", f"wave {p.get('wave_id')} starts from the integration head "
                                          f"{str(p.get('base_ref'))[:12]}: {', '.join(p.get('nodes') or [])}"))

    def _on_resolver_spawned(self, ev: _Obj, p: _Obj, seq: int, node: Any, pid: str) -> None:
        self.resolver_of[str(p.get("node_execution_id"))] = str(p.get("origin") or pid)
        o = self.fate(str(p.get("origin") or pid))
        what = (f"rerun {p.get('node_id')} (try {p.get('try')} of {p.get('max_tries')}, on_conflict: rerun)"
                if p.get("on_conflict") == "rerun" else f"resolver {p.get('node_id')} (try {p.get('try')})")
        self.ex.decisions.append(Decision(seq, "resolver", f"{what} starts on the integration head "
                                          f"{str(p.get('base_ref'))[:12]} for "
                                          f"{o.node_id or _short(o.proposal_id)}", o.proposal_id))

    def _on_integration_resolver_exhausted(self, ev: _Obj, p: _Obj, seq: int, node: Any, pid: str) -> None:
        if not pid:
            return
        f = self.fate(pid)
        f.status, f.decision, f.sequence, f.reason = "dropped", "drop", seq, f"dropped: {p.get('reason')}"
        self.ex.decisions.append(Decision(seq, "drop", f"drop {f.node_id or _short(pid)}: {p.get('reason')}", pid))

    def _on_integration_proposal_rejected(self, ev: _Obj, p: _Obj, seq: int, node: Any, pid: str) -> None:
        if not pid:
            return
        f = self.fate(pid)
        rej = [r for r in p.get("rejections") or [] if isinstance(r, Mapping)]
        f.status, f.decision, f.sequence = "rejected", "reject", seq
        f.reason = "rejected at verification: " + "; ".join(
            f"{r.get('code')}: {_clip(r.get('message', ''), 100)}" for r in rej)
        self.ex.decisions.append(Decision(seq, "reject", f"{f.node_id or _short(pid)}: {f.reason}", pid))

    def _on_integration_stack_plan(self, ev: _Obj, p: _Obj, seq: int, node: Any, pid: str) -> None:
        layers = _count(p.get("ordered_proposals"))
        # a plan that supersedes another is the one the gate judges (after validation and any ejection)
        what = f"stack plan revision {p.get('revision')}" if p.get("supersedes") else "stack plan"
        self.ex.decisions.append(Decision(seq, "plan", f"{what} with {layers} layer(s)" if layers else what))

    def _on_integration_apply_result(self, ev: _Obj, p: _Obj, seq: int, node: Any, pid: str) -> None:
        if not pid:
            return
        f = self.fate(pid)
        if p.get("applied"):
            if pid not in self.on_stack:
                self.on_stack.append(pid)
            f.status, f.reason, f.sequence = "applied", "applied", seq
            part = f" (part {pid.rsplit(':split-', 1)[1]})" if ":split-" in pid else ""
            self.ex.decisions.append(Decision(seq, "apply", f"applied {f.node_id or _short(pid)}{part}", pid))
            if f.resolves:
                o = self.fate(f.resolves)
                f.reason = f"applied; resolves {o.node_id or _short(o.proposal_id)}'s conflict"
                o.status, o.decision, o.sequence, o.resolved_by = "resolved", "resolver", seq, pid
                o.reason = f"resolved onto the integration head by {f.node_id or _short(pid)}"
                self.ex.decisions.append(Decision(seq, "resolved", f"{o.node_id or _short(o.proposal_id)} resolved "
                                                  f"by {f.node_id or _short(pid)}", o.proposal_id))

    def _on_integration_conflict_decision(self, ev: _Obj, p: _Obj, seq: int, node: Any, pid: str) -> None:
        if not pid:
            return
        f = self.fate(pid)
        action = str(p.get("action", ""))
        conflicts = [c for c in p.get("conflicts") or [] if isinstance(c, Mapping)]
        hunks = [_hunk_text(c) for c in conflicts]
        with_ = sorted({h for c in conflicts for h in self.holders(str(c.get("path")), pid)})
        where = ", ".join(hunks) or "the stack"
        who = f", already changed by {', '.join(with_)}" if with_ else ""
        reason = str(p.get("reason", ""))
        text = f"{action} {f.node_id or _short(pid)}: {where}{who}; {reason}"
        self.ex.decisions.append(Decision(seq, action or "conflict", text, pid))
        if action in ("drop", "resolver"):
            f.status = "dropped" if action == "drop" else "awaiting_resolver"
            f.decision, f.decision_id, f.sequence = action, p.get("decision_id"), seq
            f.hunks, f.conflicts_with = hunks, with_
            f.reason = f"{'dropped' if action == 'drop' else 'sent to a resolver'}: conflict at {where}{who}"
            root = pid.split(":split-")[0]
            if ":split-" in pid and root in self.fates and self.fates[root].status == "split":
                self.fates[root].reason += f"; the rest ({where}{who}) dropped"
                self.fates[root].hunks, self.fates[root].conflicts_with = hunks, with_
        elif action == "reorder":
            f.decision, f.hunks, f.conflicts_with = "reorder", hunks, with_

    def _on_integration_split_result(self, ev: _Obj, p: _Obj, seq: int, node: Any, pid: str) -> None:
        if not pid:
            return
        f = self.fate(pid)
        a, b = str(p.get("proposal_id_A")), str(p.get("proposal_id_B"))
        f.status, f.decision, f.sequence, f.parts = "split", "split", seq, [a, b]
        f.landed_files = sorted({str(k[0]) for k in _items(p.get("keep_A")) if isinstance(k, list) and k})
        total = len(set(f.landed_files) | {str(k[0]) for k in _items(p.get("keep_B")) if isinstance(k, list) and k})
        f.reason = (f"split {str(p.get('partitioning', '')).replace('_', ' ')}: the part that applies landed"
                    + (f" ({len(f.landed_files)} of {total} files)" if f.landed_files else ""))
        self.fate(a).node_id = self.fate(b).node_id = f.node_id
        self.ex.decisions.append(Decision(seq, "split", f"split {f.node_id or _short(pid)} into "
                                          f"{_short(a)} and {_short(b)}", pid))

    def _on_integration_validation_report(self, ev: _Obj, p: _Obj, seq: int, node: Any, pid: str) -> None:
        suite = str(p.get("suite") or (p.get("environment") or {}).get("suite", {}).get("suite", "?"))
        passed = bool(p.get("passed", p.get("result") in ("pass", "passed")))
        v = ValidationRun(seq, suite, str(p.get("phase") or "final"), passed, str(p.get("head_ref") or ""),
                          str(p.get("checkpoint_id") or ""),
                          _items(p.get("included_proposals") or p.get("proposal_ids")),
                          p.get("duration_s"), _failing_tests(p))
        if not passed and v.failing_tests:
            self.failing_tests[suite] = v.failing_tests
        self.ex.validations.append(v)
        covered = _count(p.get("included_proposals") or p.get("proposal_ids"))
        self.ex.decisions.append(Decision(seq, "validation", f"{v.phase} validation {suite} on "
                                          f"{covered} proposal(s): "
                                          f"{'passed' if passed else 'FAILED'}"))

    def _on_integration_bisect(self, ev: _Obj, p: _Obj, seq: int, node: Any, pid: str) -> None:
        self.bisect_suites = [str(x) for x in p.get("failing_suites") or []]
        culprits = [self.node_of.get(c.split(":split-")[0], c) for c in p.get("culprit_proposal_ids") or []]
        self.ex.decisions.append(Decision(seq, "bisect", f"bisect over {len(p.get('steps') or [])} step(s): "
                                          f"{', '.join(p.get('failing_suites') or [])} fails first with "
                                          f"{', '.join(culprits) or '?'}"))

    def _on_integration_ejected(self, ev: _Obj, p: _Obj, seq: int, node: Any, pid: str) -> None:
        suites = self.bisect_suites
        for e_pid in p.get("proposal_ids") or []:
            f = self.fate(str(e_pid))
            f.status, f.decision, f.sequence = "ejected", "bisect", seq
            f.failing_suites = [s for s in suites if s]
            f.failing_tests = [t for s in f.failing_suites for t in self.failing_tests.get(s, [])]
            names = ", ".join(t["name"] for t in f.failing_tests[:3])
            f.reason = (f"ejected by bisect: suite {', '.join(f.failing_suites) or '?'} fails with it "
                        f"(checkpoint {p.get('checkpoint_id')})" + (f"; failing: {names}" if names else ""))
            if e_pid in self.on_stack:
                self.on_stack.remove(e_pid)
        for r_pid in p.get("reapplied") or []:
            if r_pid in self.on_stack:
                self.on_stack.remove(r_pid)  # re-applied below, in order
        self.ex.decisions.append(Decision(seq, "eject", "ejected " + ", ".join(
                 self.fate(str(x)).node_id or _short(str(x)) for x in p.get("proposal_ids") or [])))

    def _on_gate_computed(self, ev: _Obj, p: _Obj, seq: int, node: Any, pid: str) -> None:
        self.ex.gate_passed = bool(p.get("passed"))
        self.ex.gate_problems = [GateProblem(str(l.get("link")), str(l.get("status")), _clip(l.get("detail", "")))
                                 for l in _items(p.get("links")) if isinstance(l, Mapping) and l.get("status") != "ok"]
        self.ex.decisions.append(Decision(seq, "gate", "gate passed" if self.ex.gate_passed else
                                          f"gate not passed: {len(self.ex.gate_problems)} link(s) missing or failing"))

    def _on_promotion_computed(self, ev: _Obj, p: _Obj, seq: int, node: Any, pid: str) -> None:
        outcome = str(p.get("outcome"))
        known = {f"{g.link}: {g.status}" for g in self.ex.gate_problems}
        for m in p.get("missing") or []:
            link, _, rest = str(m).partition(": ")
            status, _, detail = rest.partition(" (")
            if f"{link}: {status}" not in known:
                self.ex.gate_problems.append(GateProblem(link, status, _clip(detail.rstrip(")"))))
        self.ex.decisions.append(Decision(seq, "promotion", f"promotion {outcome} to {p.get('to_ref')}"))

    def _on_integration_policy(self, ev: _Obj, p: _Obj, seq: int, node: Any, pid: str) -> None:
        self.ex.domain = str((p.get("policy") or {}).get("domain") or "")

    def _on_run_finished(self, ev: _Obj, p: _Obj, seq: int, node: Any, pid: str) -> None:
        self.ex.status = str(p.get("status", "finished"))
        self.ex.reason, self.ex.head, self.ex.promoted_ref = p.get("reason"), p.get("head"), p.get("promoted_ref")
        self.ex.awaiting_consent = bool(p.get("awaiting_consent"))
        self.ex.consent_token_file = p.get("consent_token_file")
        self.ex.blocked_tasks = int((p.get("counts") or {}).get("blocked") or 0)
        self.ex.partial = bool(p.get("partial"))
        self.ex.cost = dict(p["cost"]) if isinstance(p.get("cost"), Mapping) else None
        rows = p.get("tasks_not_landed") if self.ex.partial else None
        self.ex.tasks_not_landed = [dict(r) for r in rows if isinstance(r, Mapping)] if isinstance(rows, list) else []

    def explanation(self) -> Explanation:
        ex, fates, attempts, last_failure, succeeded = (self.ex, self.fates, self.attempts, self.last_failure,
                                                        self.succeeded)
        ex.failed_tasks = []
        for nid in sorted(set(last_failure) - succeeded):
            code, message, tail = last_failure[nid]
            ex.failed_tasks.append(FailedTask(nid, attempts.get(nid, 0), code, _clip(message), _tail(tail)))
        ex.proposals = sorted(fates.values(), key=lambda f: (f.node_id, f.proposal_id))
        from coordinator.integration.policy import risk_sources
        ex.risk_sources = risk_sources(self.verified)
        if ex.gate_passed is not None or any(d.kind == "promotion" for d in ex.decisions):
            for f in ex.proposals:
                if f.status == "submitted" and ":split-" not in f.proposal_id:
                    f.status, f.reason = "not_integrated", "not part of the integration (no decision recorded)"
        return ex


# topic -> the Explainer method that folds it in
_HANDLERS: dict[Any, Callable[..., None]] = {
    "run.started": Explainer._on_run_started,
    "task.dispatched": Explainer._on_task_dispatched,
    "task.completed": Explainer._on_task_end,
    "task.failed": Explainer._on_task_end,
    "task.timeout": Explainer._on_task_end,
    "task.lost": Explainer._on_task_end,
    "patch.submitted": Explainer._on_patch_submitted,
    "integration.proposal_verified": Explainer._on_integration_proposal_verified,
    "wave.started": Explainer._on_wave_started,
    "resolver.spawned": Explainer._on_resolver_spawned,
    "integration.resolver_exhausted": Explainer._on_integration_resolver_exhausted,
    "integration.proposal_rejected": Explainer._on_integration_proposal_rejected,
    "integration.stack_plan": Explainer._on_integration_stack_plan,
    "integration.apply_result": Explainer._on_integration_apply_result,
    "integration.conflict_decision": Explainer._on_integration_conflict_decision,
    "integration.split_result": Explainer._on_integration_split_result,
    "integration.validation_report": Explainer._on_integration_validation_report,
    "integration.bisect": Explainer._on_integration_bisect,
    "integration.ejected": Explainer._on_integration_ejected,
    "gate.computed": Explainer._on_gate_computed,
    "promotion.computed": Explainer._on_promotion_computed,
    "integration.policy": Explainer._on_integration_policy,
    "run.finished": Explainer._on_run_finished,
}


def explain(run_id: str, events: Iterable[Mapping[str, Any]]) -> Explanation:
    """Fold a run's events into an Explanation."""
    ex = Explainer(run_id)
    for ev in events:
        ex.feed(ev)
    return ex.explanation()


def reasons(ex: Explanation, width: int = 100) -> dict[str, Any]:
    """The reasons as data (`dome status --json`, `dome run --json`): the gate's
    missing links, failed tasks, proposals that did not land whole, and the
    verdict block's lines."""
    d = ex.to_json()
    return {"status": ex.status, "gate_passed": ex.gate_passed, "gate_problems": d["gate_problems"],
            "failed_tasks": d["failed_tasks"],
            "partial": ex.partial, "tasks_not_landed": d["tasks_not_landed"],
            "proposals_not_landed": [asdict(p) for p in ex.not_landed if ":split-" not in p.proposal_id],
            "verdict": verdict_lines(ex, width)}


def verdict_lines(ex: Explanation, width: int = 100) -> list[str]:
    """The verdict block: what happened and, when anything did not land, why."""
    w = max(40, width)
    out = [f"run {ex.run_id}: {ex.status}" + (" (partial)" if ex.partial else "")]
    if ex.status == "promoted":
        out.append(f"  promoted {str(ex.head or '')[:12]} -> {ex.promoted_ref}")
    elif ex.awaiting_consent:
        out.append("  held at the human gate: dome promote " + ex.run_id + " --consent TOKEN"
                   + (f" (token in {ex.consent_token_file})" if ex.consent_token_file else ""))
    elif ex.reason and not ex.gate_problems and not ex.failed_tasks:
        out.append(f"  {ex.reason}")
    if ex.gate_problems and ex.status != "promoted":
        out.append(f"  not promoted to {ex.target_ref or 'the target'}; the gate is missing:")
        out += [_fit(f"    - {g.link}: {g.status}" + (f" ({g.detail})" if g.detail else ""), w)
                for g in ex.gate_problems]
    if ex.partial:
        what = "promoted" if ex.status == "promoted" else "integrated"
        out.append(_fit(f"  {what} without {len(ex.tasks_not_landed)} task(s) that did not land (if_tasks_fail: "
                        "promote_rest): " + ", ".join(f"{t.get('node_id')} ({t.get('status')})"
                                                      for t in ex.tasks_not_landed), w))
    if ex.failed_tasks:
        out.append(f"  {len(ex.failed_tasks)} task(s) failed:")
        for t in ex.failed_tasks:
            out.append(_fit(f"    - {t.node_id} after {t.attempts} attempt(s): {t.code} {t.message}", w))
            out += [_fit(f"        | {line}", w) for line in t.stderr_tail.splitlines()]
    if ex.blocked_tasks:
        out.append(f"  {ex.blocked_tasks} task(s) did not run: they depend on a task that failed")
    if ex.cost:
        out.append("  cost: " + cost_line(ex.cost))
    out += risk_lines(ex, w)
    landed = [p for p in ex.proposals if p.status == "applied" and ":split-" not in p.proposal_id]
    others = [p for p in ex.not_landed if ":split-" not in p.proposal_id]
    if ex.proposals and (others or ex.gate_passed is not None):
        out.append(f"  proposals: {len(landed)} applied whole, {len(others)} not"
                   + (":" if others else ""))
        for p in others:
            out.append(_fit(f"    - {p.node_id or _short(p.proposal_id)}: {p.reason}", w))
            for t in p.failing_tests[:5]:
                out.append(_fit(f"        failing test {t.get('name')}", w))
                out += [_fit(f"        | {line}", w) for line in _items(t.get("first_lines"))[:FIRST_LINES]]
    return [line for item in out for line in _fit(item, w).split("\n")]  # wrapped items: one line each


def cost_line(cost: Mapping[str, Any]) -> str:
    """What a run cost in CPU, in words: the total, then its parts."""
    def s(key: str) -> str:
        v = cost.get(key)
        return "not measured" if v is None else f"{float(v):.1f} s"
    return (f"{s('total_cpu_s')} of CPU (coordinator {s('coordinator_cpu_s')}, workers {s('workers_cpu_s')}, "
            f"git and other processes {s('waited_cpu_s')})")


def risk_lines(ex: Explanation, width: int = 100) -> list[str]:
    """Which proposal raised the run's risk above low, by which rule, with its figures."""
    from coordinator.integration.policy import describe_source
    out = []
    for r in ex.risk_sources:
        why = describe_source(r)
        out.append(_fit(f"  risk {r['risk']}: raised by {r.get('node_id') or _short(str(r['proposal_id']))} "
                        f"({_short(str(r['proposal_id']))}): {why}", max(40, width)))
    if out and ex.domain:
        out.insert(0, f"  policy preset: {ex.domain}")
    return out


def _fit(line: str, width: int) -> str:
    """Wrap a list line to the terminal, continuation indented under its text."""
    if len(line) <= width:
        return line
    import textwrap
    body = line.lstrip()
    lead = len(line) - len(body) + (2 if body.startswith(("- ", "| ")) else 0)
    # long words (paths, tokens) stay whole so they can be copied
    return textwrap.fill(line, width=width, subsequent_indent=" " * lead, break_on_hyphens=False,
                         break_long_words=False)
