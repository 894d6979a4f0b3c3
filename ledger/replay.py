"""Replay: fold a run's ControlEvents into its state (pure, deterministic).

`fold(events)` applies one reducer per topic, in sequence order, to a
private working copy and returns a RunState; the same events always give
the same state and `state_digest(state)` the same bytes. Topics without a
reducer are counted in `other_topics` and otherwise ignored, so a ledger
written by a newer dome still replays. Later areas add topics with
`@reducer("topic.name")` (or pass `reducers={...}` to fold) -- a reducer is
`fn(work: Work, event) -> None` and may only touch `work`.

State (have/need): per task, its attempts (node_execution_ids), status,
which attempt succeeded, whether it was acknowledged, and the outputs it
produced (have) or still owes (need); per attempt, its status and progress;
proposals and their fate; every decision event (scheduling, selection,
conflict, stack plan, apply result, validation, gate, promotion) by
reference; revoked grants; the run's start and finish.
"""
from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from registry.canonical import digest_json

ATTEMPT_END = {"task.completed": "completed", "task.failed": "failed", "task.timeout": "timeout",
               "task.cancelled": "cancelled", "task.lost": "lost"}
DECISION_TOPICS = ("decision.scheduling", "decision.selection", "decision.conflict",
                   "scheduling.decision", "stack.planned", "apply.result", "validation.report",
                   "gate.computed", "promotion.computed")


@dataclass
class Work:
    """The mutable working state reducers write to (private to one fold)."""

    run_id: str | None = None
    status: str = "new"
    started: Any = None
    finished: Any = None
    last_sequence: int = 0
    head_digest: str | None = None
    events: int = 0
    waves: dict[str, dict[str, Any]] = field(default_factory=dict)
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    attempts: dict[str, dict[str, Any]] = field(default_factory=dict)
    proposals: dict[str, dict[str, Any]] = field(default_factory=dict)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    revoked: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)
    other_topics: dict[str, int] = field(default_factory=dict)

    def task(self, key: str) -> dict[str, Any]:
        t = self.tasks.get(key)
        if t is None:
            t = self.tasks[key] = {"status": "pending", "attempts": [], "succeeded_by": None,
                                   "acked": False, "have": [], "need": []}
        return t


@dataclass(frozen=True)
class RunState:
    """A run as its events say it is. Treat every field as read-only."""

    run_id: str | None
    status: str
    started: Any
    finished: Any
    last_sequence: int
    head_digest: str | None
    events: int
    waves: Mapping[str, Mapping[str, Any]]
    tasks: Mapping[str, Mapping[str, Any]]
    attempts: Mapping[str, Mapping[str, Any]]
    proposals: Mapping[str, Mapping[str, Any]]
    decisions: tuple[Mapping[str, Any], ...]
    revoked: tuple[Mapping[str, Any], ...]
    artifacts: tuple[str, ...]
    other_topics: Mapping[str, int]

    @property
    def have(self) -> list[str]:
        """Tasks whose evidence is in: an attempt succeeded."""
        return sorted(k for k, t in self.tasks.items() if t["succeeded_by"] is not None)

    @property
    def need(self) -> list[str]:
        """Tasks still owed: no attempt has succeeded yet."""
        return sorted(k for k, t in self.tasks.items() if t["succeeded_by"] is None)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "status": self.status, "started": self.started,
            "finished": self.finished, "last_sequence": self.last_sequence,
            "head_digest": self.head_digest, "events": self.events,
            "waves": self.waves, "tasks": self.tasks, "attempts": self.attempts,
            "proposals": self.proposals, "decisions": list(self.decisions),
            "revoked": list(self.revoked), "artifacts": list(self.artifacts),
            "have": self.have, "need": self.need, "other_topics": self.other_topics,
        }


Reducer = Callable[[Work, Any], None]
REDUCERS: dict[str, Reducer] = {}


def reducer(*topics: str) -> Callable[[Reducer], Reducer]:
    """Register `fn` as the reducer of `topics` (one home per topic)."""
    def register(fn: Reducer) -> Reducer:
        for t in topics:
            if t in REDUCERS and REDUCERS[t] is not fn:
                raise ValueError(f"topic {t!r} already has a reducer")
            REDUCERS[t] = fn
        return fn
    return register


def _task_key(ev: Any, payload: Mapping[str, Any]) -> str | None:
    key = ev.task_id or ev.node_id or payload.get("task_id") or payload.get("node_id")
    return key if isinstance(key, str) else None


def _neid(ev: Any, payload: Mapping[str, Any]) -> str | None:
    neid = ev.node_execution_id or payload.get("node_execution_id")
    return neid if isinstance(neid, str) else None


def _ids(value: Any) -> list[str]:
    out: list[str] = []
    if not isinstance(value, list):
        return out
    for item in value:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, Mapping):
            ident = item.get("node_id") or item.get("task_id") or item.get("id")
            if isinstance(ident, str):
                out.append(ident)
    return out


@reducer("run.started")
def _run_started(w: Work, ev: Any) -> None:
    p = ev.payload
    w.run_id, w.status, w.started = ev.run_id, "running", p
    for key in _ids(p.get("node_ids") or p.get("nodes") or p.get("tasks")):
        w.task(key)


@reducer("run.resumed")
def _run_resumed(w: Work, ev: Any) -> None:
    if w.status not in ("finished", "cancelled"):
        w.status = "running"


@reducer("run.finished", "run.cancelled")
def _run_finished(w: Work, ev: Any) -> None:
    w.finished = ev.payload
    w.status = "cancelled" if ev.topic == "run.cancelled" else "finished"


@reducer("wave.started", "wave.finished", "wave.rebased")
def _wave(w: Work, ev: Any) -> None:
    wave_id = ev.wave_id or ev.payload.get("wave_id")
    if not isinstance(wave_id, str):
        return
    wave = w.waves.setdefault(wave_id, {"status": "started", "started_sequence": ev.sequence,
                                        "node_ids": []})
    if ev.topic == "wave.started":
        nodes = _ids(ev.payload.get("node_ids") or ev.payload.get("nodes"))
        wave["node_ids"] = nodes
        for key in nodes:
            w.task(key)
    else:
        wave["status"] = ev.topic.split(".", 1)[1]
        wave[wave["status"] + "_sequence"] = ev.sequence


@reducer("task.scheduled")
def _task_scheduled(w: Work, ev: Any) -> None:
    key = _task_key(ev, ev.payload)
    if key is not None:
        t = w.task(key)
        if t["status"] == "pending":
            t["status"] = "scheduled"
        need = ev.payload.get("outputs") or ev.payload.get("required_outputs")
        if isinstance(need, list):
            t["need"] = sorted({str(x) for x in need})


@reducer("task.dispatched")
def _task_dispatched(w: Work, ev: Any) -> None:
    p = ev.payload
    key, neid = _task_key(ev, p), _neid(ev, p)
    if key is None or neid is None or neid in w.attempts:
        return
    t = w.task(key)
    t["attempts"].append(neid)
    if t["succeeded_by"] is None:
        t["status"] = "running"
    w.attempts[neid] = {"task": key, "wave_id": ev.wave_id, "status": "dispatched",
                        "dispatched_sequence": ev.sequence, "progress": None}


@reducer("task.progress")
def _task_progress(w: Work, ev: Any) -> None:
    a = w.attempts.get(_neid(ev, ev.payload) or "")
    if a is not None and a["status"] == "dispatched":
        value = ev.payload.get("fraction", ev.payload.get("progress"))
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            a["progress"] = value


@reducer(*ATTEMPT_END)
def _attempt_end(w: Work, ev: Any) -> None:
    p = ev.payload
    neid = _neid(ev, p)
    a = w.attempts.get(neid or "")
    if a is None or a["status"] != "dispatched":
        return  # late or duplicate terminal events change nothing
    status = ATTEMPT_END[ev.topic]
    succeeded = status == "completed" and p.get("outcome", "succeeded") == "succeeded"
    a["status"] = status if status != "completed" or succeeded else "failed"
    a["ended_sequence"] = ev.sequence
    t = w.task(a["task"])
    if succeeded and t["succeeded_by"] is None:
        t["succeeded_by"], t["status"] = neid, "succeeded"
        outputs = p.get("outputs") or p.get("evidence")
        if isinstance(outputs, list):
            have = sorted({x if isinstance(x, str) else digest_json(x) for x in outputs})
            t["have"] = have
            t["need"] = [n for n in t["need"] if n not in have]
    elif t["succeeded_by"] is None and not any(
            w.attempts[x]["status"] == "dispatched" for x in t["attempts"]):
        t["status"] = "failed"


@reducer("task.ack")
def _task_ack(w: Work, ev: Any) -> None:
    key = _task_key(ev, ev.payload)
    if key is not None:
        w.task(key)["acked"] = True


@reducer("patch.submitted", "patch.verified", "patch.rejected")
def _patch(w: Work, ev: Any) -> None:
    p = ev.payload
    pid = p.get("proposal_id") or p.get("object_id")
    if not isinstance(pid, str) or not pid:
        return
    prop = w.proposals.get(pid)
    if prop is None:
        prop = w.proposals[pid] = {"status": "submitted", "node_execution_id": _neid(ev, p),
                                   "task": _task_key(ev, p), "diff_digest": p.get("diff_digest"),
                                   "submitted_sequence": ev.sequence}
    if ev.topic != "patch.submitted":
        prop["status"] = ev.topic.split(".", 1)[1]
        if ev.topic == "patch.rejected":
            prop["reasons"] = p.get("reasons") or p.get("reason")


@reducer(*DECISION_TOPICS)
def _decision(w: Work, ev: Any) -> None:
    p = ev.payload
    entry: dict[str, Any] = {"topic": ev.topic, "sequence": ev.sequence, "event_id": ev.event_id,
                             "wave_id": ev.wave_id, "payload_digest": ev.payload_digest,
                             "signed": ev.signature is not None}
    for key in ("passed", "decision", "outcome", "status"):
        if key in p and isinstance(p[key], (str, bool)):
            entry[key] = p[key]
    w.decisions.append(entry)
    if ev.topic == "apply.result":
        pid = p.get("proposal_id")
        if isinstance(pid, str) and pid in w.proposals:
            w.proposals[pid]["applied"] = p.get("status", p.get("outcome"))


@reducer("grant.revoked")
def _revoked(w: Work, ev: Any) -> None:
    w.revoked.append({"jti": ev.payload.get("jti"), "profile_id": ev.payload.get("profile_id"),
                      "sequence": ev.sequence})


@reducer("artifact.put")
def _artifact(w: Work, ev: Any) -> None:
    d = ev.payload.get("digest")
    if isinstance(d, str):
        w.artifacts.append(d)


class _MappingEvent:
    """Attribute view of a dict event (export files, tests)."""

    __slots__ = ("_m",)

    def __init__(self, m: Mapping[str, Any]) -> None:
        self._m = m

    def __getattr__(self, name: str) -> Any:
        return self._m.get(name)


def fold(events: Iterable[Any], *, reducers: Mapping[str, Reducer] | None = None) -> RunState:
    """Fold events (EventRecords, or dicts with the same keys) in the order
    given -- the ledger's sequence order -- into a RunState."""
    was_gc = gc.isenabled()
    gc.disable()  # the fold allocates many small dicts and no cycles
    try:
        return _fold(events, REDUCERS if reducers is None else {**REDUCERS, **reducers})
    finally:
        if was_gc:
            gc.enable()


def _fold(events: Iterable[Any], table: Mapping[str, Reducer]) -> RunState:
    get = table.get
    w = Work()
    other = w.other_topics
    for ev in events:
        if type(ev) is dict:
            ev = _MappingEvent(ev)
        w.events += 1
        w.last_sequence = ev.sequence
        w.head_digest = ev.record_digest
        fn = get(ev.topic)
        if fn is None:
            other[ev.topic] = other.get(ev.topic, 0) + 1
        else:
            fn(w, ev)
    return RunState(
        run_id=w.run_id, status=w.status, started=w.started, finished=w.finished,
        last_sequence=w.last_sequence, head_digest=w.head_digest, events=w.events,
        waves=w.waves, tasks=w.tasks, attempts=w.attempts, proposals=w.proposals,
        decisions=tuple(w.decisions), revoked=tuple(w.revoked), artifacts=tuple(w.artifacts),
        other_topics=dict(sorted(other.items())))


def state_digest(state: RunState) -> str:
    """sha256 over the canonical JSON of the state: identical bytes for
    identical replays."""
    return digest_json(state.to_json())


__all__ = ["RunState", "Work", "REDUCERS", "reducer", "fold", "state_digest", "DECISION_TOPICS"]
