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
from typing import Any, Iterable, Mapping

STDERR_TAIL_LINES = 6
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
    conflicts_with: list[str] = field(default_factory=list)  # node ids of proposals already on the stack
    hunks: list[str] = field(default_factory=list)  # "path hunk N" / "path"
    failing_suites: list[str] = field(default_factory=list)
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
        ex, fates, node_of, files_of = self.ex, self.fates, self.node_of, self.files_of
        on_stack, attempts, last_failure, succeeded = self.on_stack, self.attempts, self.last_failure, self.succeeded
        fate, holders = self.fate, self.holders
        n0 = len(ex.decisions)
        topic = ev.get("topic")
        p: Mapping[str, Any] = ev.get("payload") or {}
        seq = int(ev.get("sequence") or 0)
        node = ev.get("node_id") or p.get("node_id")
        pid = str(p.get("proposal_id") or "")
        if topic == "run.started":
            ex.target_ref = p.get("promote_to")
        elif topic == "task.dispatched" and node:
            attempts[node] = attempts.get(node, 0) + 1
        elif topic == "task.completed" and node and p.get("outcome") == "succeeded":
            succeeded.add(node)
            resolves = self.resolver_of.get(str(ev.get("node_execution_id") or p.get("node_execution_id")))
            if resolves and NODE_SEP in node and not p.get("proposal_id"):
                o = fate(resolves)
                o.status, o.decision, o.sequence = "resolved", "resolver", seq
                o.reason = f"resolver {node} found nothing left to do on the integration head"
                ex.decisions.append(Decision(seq, "resolved", f"{o.node_id or _short(o.proposal_id)}: {o.reason}",
                                             o.proposal_id))
        elif topic in ("task.completed", "task.failed", "task.timeout", "task.lost") and node:
            err = p.get("error") if isinstance(p.get("error"), Mapping) else {}
            details = err.get("details") if isinstance(err.get("details"), Mapping) else {}
            code = str(err.get("code") or {"task.timeout": "TIMEOUT", "task.lost": "LOST"}.get(topic, "FAILED"))
            message = str(err.get("message") or p.get("reason") or "")
            last_failure[node] = (code, message, str(details.get("stderr_tail") or p.get("stderr_tail") or ""))
        elif topic == "patch.submitted" and pid:
            node_of[pid] = str(node or "")
            files_of[pid] = set(p.get("touched_files") or [])
            fate(pid)
        elif topic == "integration.proposal_verified" and pid:
            node_of.setdefault(pid, str(p.get("node_id") or node or ""))
            files_of[pid] = set(p.get("touched_files") or files_of.get(pid, ()))
            f = fate(pid)
            f.node_id, f.files = node_of[pid], sorted(files_of[pid])
            res = p.get("resolves") if isinstance(p.get("resolves"), Mapping) else {}
            f.resolves = str(res.get("origin_proposal_id") or "") or None
            what = (f" (resolver of {fate(f.resolves).node_id or _short(f.resolves)}, conflict decision "
                    f"{res.get('conflict_decision')})" if f.resolves else "")
            ex.decisions.append(Decision(seq, "verify", f"{f.node_id}: proposal verified{what}", pid))
        elif topic == "wave.started" and p.get("base_source") == "integration_head":
            ex.decisions.append(Decision(seq, "wave", f"wave {p.get('wave_id')} starts from the integration head "
                                         f"{str(p.get('base_ref'))[:12]}: {', '.join(p.get('nodes') or [])}"))
        elif topic == "resolver.spawned":
            self.resolver_of[str(p.get("node_execution_id"))] = str(p.get("origin") or pid)
            o = fate(str(p.get("origin") or pid))
            ex.decisions.append(Decision(seq, "resolver", f"resolver {p.get('node_id')} (try {p.get('try')}) "
                                         f"starts on the integration head {str(p.get('base_ref'))[:12]} for "
                                         f"{o.node_id or _short(o.proposal_id)}", o.proposal_id))
        elif topic == "integration.resolver_exhausted" and pid:
            f = fate(pid)
            f.status, f.decision, f.sequence, f.reason = "dropped", "drop", seq, f"dropped: {p.get('reason')}"
            ex.decisions.append(Decision(seq, "drop", f"drop {f.node_id or _short(pid)}: {p.get('reason')}", pid))
        elif topic == "integration.proposal_rejected" and pid:
            f = fate(pid)
            rej = [r for r in p.get("rejections") or [] if isinstance(r, Mapping)]
            f.status, f.decision, f.sequence = "rejected", "reject", seq
            f.reason = "rejected at verification: " + "; ".join(
                f"{r.get('code')}: {_clip(r.get('message', ''), 100)}" for r in rej)
            ex.decisions.append(Decision(seq, "reject", f"{f.node_id or _short(pid)}: {f.reason}", pid))
        elif topic == "integration.stack_plan":
            layers = _count(p.get("ordered_proposals"))
            # a plan that supersedes another is the one the gate judges (after validation and any ejection)
            what = f"stack plan revision {p.get('revision')}" if p.get("supersedes") else "stack plan"
            ex.decisions.append(Decision(seq, "plan", f"{what} with {layers} layer(s)" if layers else what))
        elif topic == "integration.apply_result" and pid:
            f = fate(pid)
            if p.get("applied"):
                if pid not in on_stack:
                    on_stack.append(pid)
                f.status, f.reason, f.sequence = "applied", "applied", seq
                part = f" (part {pid.rsplit(':split-', 1)[1]})" if ":split-" in pid else ""
                ex.decisions.append(Decision(seq, "apply", f"applied {f.node_id or _short(pid)}{part}", pid))
                if f.resolves:
                    o = fate(f.resolves)
                    f.reason = f"applied; resolves {o.node_id or _short(o.proposal_id)}'s conflict"
                    o.status, o.decision, o.sequence, o.resolved_by = "resolved", "resolver", seq, pid
                    o.reason = f"resolved onto the integration head by {f.node_id or _short(pid)}"
                    ex.decisions.append(Decision(seq, "resolved", f"{o.node_id or _short(o.proposal_id)} resolved "
                                                 f"by {f.node_id or _short(pid)}", o.proposal_id))
        elif topic == "integration.conflict_decision" and pid:
            f = fate(pid)
            action = str(p.get("action", ""))
            conflicts = [c for c in p.get("conflicts") or [] if isinstance(c, Mapping)]
            hunks = [_hunk_text(c) for c in conflicts]
            with_ = sorted({h for c in conflicts for h in holders(str(c.get("path")), pid)})
            where = ", ".join(hunks) or "the stack"
            who = f", already changed by {', '.join(with_)}" if with_ else ""
            reason = str(p.get("reason", ""))
            text = f"{action} {f.node_id or _short(pid)}: {where}{who}; {reason}"
            ex.decisions.append(Decision(seq, action or "conflict", text, pid))
            if action in ("drop", "resolver"):
                f.status = "dropped" if action == "drop" else "awaiting_resolver"
                f.decision, f.decision_id, f.sequence = action, p.get("decision_id"), seq
                f.hunks, f.conflicts_with = hunks, with_
                f.reason = f"{'dropped' if action == 'drop' else 'sent to a resolver'}: conflict at {where}{who}"
                root = pid.split(":split-")[0]
                if ":split-" in pid and root in fates and fates[root].status == "split":
                    fates[root].reason += f"; the rest ({where}{who}) dropped"
                    fates[root].hunks, fates[root].conflicts_with = hunks, with_
            elif action == "reorder":
                f.decision, f.hunks, f.conflicts_with = "reorder", hunks, with_
        elif topic == "integration.split_result" and pid:
            f = fate(pid)
            a, b = str(p.get("proposal_id_A")), str(p.get("proposal_id_B"))
            f.status, f.decision, f.sequence, f.parts = "split", "split", seq, [a, b]
            f.reason = f"split {str(p.get('partitioning', '')).replace('_', ' ')}: the part that applies landed"
            fate(a).node_id = fate(b).node_id = f.node_id
            ex.decisions.append(Decision(seq, "split", f"split {f.node_id or _short(pid)} into "
                                         f"{_short(a)} and {_short(b)}", pid))
        elif topic == "integration.validation_report":
            suite = str(p.get("suite") or (p.get("environment") or {}).get("suite", {}).get("suite", "?"))
            passed = bool(p.get("passed", p.get("result") in ("pass", "passed")))
            v = ValidationRun(seq, suite, str(p.get("phase") or "final"), passed, str(p.get("head_ref") or ""),
                              str(p.get("checkpoint_id") or ""),
                              _items(p.get("included_proposals") or p.get("proposal_ids")),
                              p.get("duration_s"))
            ex.validations.append(v)
            ex.decisions.append(Decision(seq, "validation", f"{v.phase} validation {suite} on "
                                         f"{_count(p.get('included_proposals') or p.get('proposal_ids'))} proposal(s): "
                                         f"{'passed' if passed else 'FAILED'}"))
        elif topic == "integration.bisect":
            self.bisect_suites = [str(x) for x in p.get("failing_suites") or []]
            culprits = [node_of.get(c.split(":split-")[0], c) for c in p.get("culprit_proposal_ids") or []]
            ex.decisions.append(Decision(seq, "bisect", f"bisect over {len(p.get('steps') or [])} step(s): "
                                         f"{', '.join(p.get('failing_suites') or [])} fails first with "
                                         f"{', '.join(culprits) or '?'}"))
        elif topic == "integration.ejected":
            suites = self.bisect_suites
            for e_pid in p.get("proposal_ids") or []:
                f = fate(str(e_pid))
                f.status, f.decision, f.sequence = "ejected", "bisect", seq
                f.failing_suites = [s for s in suites if s]
                f.reason = (f"ejected by bisect: suite {', '.join(f.failing_suites) or '?'} fails with it "
                            f"(checkpoint {p.get('checkpoint_id')})")
                if e_pid in on_stack:
                    on_stack.remove(e_pid)
            for r_pid in p.get("reapplied") or []:
                if r_pid in on_stack:
                    on_stack.remove(r_pid)  # re-applied below, in order
            ex.decisions.append(Decision(seq, "eject", "ejected " + ", ".join(
                fate(str(x)).node_id or _short(str(x)) for x in p.get("proposal_ids") or [])))
        elif topic == "gate.computed":
            ex.gate_passed = bool(p.get("passed"))
            ex.gate_problems = [GateProblem(str(l.get("link")), str(l.get("status")), _clip(l.get("detail", "")))
                                for l in _items(p.get("links")) if isinstance(l, Mapping) and l.get("status") != "ok"]
            ex.decisions.append(Decision(seq, "gate", "gate passed" if ex.gate_passed else
                                         f"gate not passed: {len(ex.gate_problems)} link(s) missing or failing"))
        elif topic == "promotion.computed":
            outcome = str(p.get("outcome"))
            known = {f"{g.link}: {g.status}" for g in ex.gate_problems}
            for m in p.get("missing") or []:
                link, _, rest = str(m).partition(": ")
                status, _, detail = rest.partition(" (")
                if f"{link}: {status}" not in known:
                    ex.gate_problems.append(GateProblem(link, status, _clip(detail.rstrip(")"))))
            ex.decisions.append(Decision(seq, "promotion", f"promotion {outcome} to {p.get('to_ref')}"))
        elif topic == "run.finished":
            ex.status = str(p.get("status", "finished"))
            ex.reason, ex.head, ex.promoted_ref = p.get("reason"), p.get("head"), p.get("promoted_ref")
            ex.awaiting_consent = bool(p.get("awaiting_consent"))
            ex.consent_token_file = p.get("consent_token_file")
            ex.blocked_tasks = int((p.get("counts") or {}).get("blocked") or 0)
            ex.partial = bool(p.get("partial"))
            ex.cost = dict(p["cost"]) if isinstance(p.get("cost"), Mapping) else None
            rows = p.get("tasks_not_landed") if ex.partial else None
            ex.tasks_not_landed = [dict(r) for r in rows if isinstance(r, Mapping)] if isinstance(rows, list) else []
        return ex.decisions[n0:]

    def explanation(self) -> Explanation:
        ex, fates, attempts, last_failure, succeeded = (self.ex, self.fates, self.attempts, self.last_failure,
                                                        self.succeeded)
        ex.failed_tasks = []
        for nid in sorted(set(last_failure) - succeeded):
            code, message, tail = last_failure[nid]
            ex.failed_tasks.append(FailedTask(nid, attempts.get(nid, 0), code, _clip(message), _tail(tail)))
        ex.proposals = sorted(fates.values(), key=lambda f: (f.node_id, f.proposal_id))
        if ex.gate_passed is not None or any(d.kind == "promotion" for d in ex.decisions):
            for f in ex.proposals:
                if f.status == "submitted" and ":split-" not in f.proposal_id:
                    f.status, f.reason = "not_integrated", "not part of the integration (no decision recorded)"
        return ex


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
    landed = [p for p in ex.proposals if p.status == "applied" and ":split-" not in p.proposal_id]
    others = [p for p in ex.not_landed if ":split-" not in p.proposal_id]
    if ex.proposals and (others or ex.gate_passed is not None):
        out.append(f"  proposals: {len(landed)} applied whole, {len(others)} not"
                   + (":" if others else ""))
        out += [_fit(f"    - {p.node_id or _short(p.proposal_id)}: {p.reason}", w) for p in others]
    return [line for item in out for line in _fit(item, w).split("\n")]  # wrapped items: one line each


def cost_line(cost: Mapping[str, Any]) -> str:
    """What a run cost in CPU, in words: the total, then its parts."""
    def s(key: str) -> str:
        v = cost.get(key)
        return "not measured" if v is None else f"{float(v):.1f} s"
    return (f"{s('total_cpu_s')} of CPU (coordinator {s('coordinator_cpu_s')}, workers {s('workers_cpu_s')}, "
            f"git and other processes {s('waited_cpu_s')})")


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
