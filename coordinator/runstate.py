"""The run loop's view of a run, folded from ledger events (pure).

`fold(events)` and `apply(state, event)` turn the ledger's ControlEvents into
the have/need state the scheduler reads: per node, how many attempts were
dispatched, which are still active, how many failed, and whether (and by
which node_execution_id) it succeeded. The run loop keeps its state by
applying every event it appends through `apply`, and `--resume` rebuilds the
same state by folding the stored events, so both always agree.

Events are anything with `.topic`, `.payload` and `.node_id` (EventRecord) or
plain dicts with those keys.
"""
from __future__ import annotations

import collections.abc as _abc
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from .persistent import PMap, PSet, PVector

# topics the run loop writes and reads
RUN_STARTED = "run.started"
RUN_FINISHED = "run.finished"
RUN_RESUMED = "run.resumed"
SCHEDULING_DECISION = "scheduling.decision"
WAVE_STARTED = "wave.started"
TASK_DISPATCHED = "task.dispatched"
TASK_PROGRESS = "task.progress"
TASK_COMPLETED = "task.completed"
TASK_FAILED = "task.failed"
TASK_TIMEOUT = "task.timeout"
TASK_CANCELLED = "task.cancelled"
TASK_LOST = "task.lost"
TASK_ACK = "task.ack"
TASK_ABANDONED = "task.abandoned"  # a node the run will not try again (its code says why; not an attempt)
PATCH_SUBMITTED = "patch.submitted"
ARTIFACT_PUT = "artifact.put"
SANDBOX_VIOLATION = "sandbox.violation"
SANDBOX_VIOLATION_CODE = "SANDBOX_VIOLATION"  # the error code an attempt failed by a sandbox limit carries

TERMINAL_ATTEMPT_TOPICS = (TASK_COMPLETED, TASK_FAILED, TASK_TIMEOUT, TASK_CANCELLED, TASK_LOST)


@dataclass(frozen=True)
class NodeState:
    attempts: int = 0            # dispatched attempts (first, retries, endgame duplicates)
    failures: int = 0            # attempts that ended failed or timed out (charged retries)
    active: tuple[str, ...] = ()  # node_execution_ids dispatched and not yet ended
    succeeded_by: str | None = None
    acked: bool = False
    last_error: str | None = None  # error code of the latest failed attempt (what retry policy reads)

    @property
    def succeeded(self) -> bool:
        return self.succeeded_by is not None


@dataclass(frozen=True)
class RunState:
    run_id: str | None = None
    started: Mapping[str, Any] | None = None
    nodes: Mapping[str, NodeState] = field(default_factory=PMap)
    executions: Mapping[str, Mapping[str, Any]] = field(default_factory=PMap)  # neid -> dispatch payload
    ended: frozenset[str] | PSet = field(default_factory=PSet)
    waves: int = 0
    total_attempts: int = 0
    lost_attempts: int = 0  # ended by a coordinator restart: they do not spend the retry budget
    last_sequence: int = 0
    finished: Mapping[str, Any] | None = None
    proposals: Sequence[Mapping[str, Any]] = field(default_factory=PVector)
    proposal_of: Mapping[str, Mapping[str, Any]] = field(default_factory=PMap)  # neid -> its latest proposal

    def node(self, node_id: str) -> NodeState:
        return self.nodes.get(node_id, NodeState())

    def active_executions(self) -> list[str]:
        return sorted(e for e in self.executions if e not in self.ended)


def _get(event: Any, name: str) -> Any:
    if type(event) is dict or isinstance(event, _abc.Mapping):
        return event.get(name)
    return getattr(event, name, None)


def _pmap(m: Mapping) -> PMap:
    return m if isinstance(m, PMap) else PMap(m)


class _Dict(dict):
    """A plain dict with the persistent map's update call (changes in place)."""

    def set(self, key: Any, value: Any, owned: Any = None) -> _Dict:
        self[key] = value
        return self


class _Set(set):
    def add(self, item: Any, owned: Any = None) -> _Set:  # type: ignore[override]
        super().add(item)
        return self


class _List(list):
    def append(self, item: Any) -> _List:  # type: ignore[override]
        super().append(item)
        return self


class _Folding:
    """A RunState being folded, in one of two forms (the same steps either way):

    - persistent (`apply`, the run loop's event by event state): the maps, set and list
      are persistent (coordinator.persistent), so one event costs O(log n) however many
      nodes the run has, and no RunState handed out before is changed by a later event
      (readers on other threads keep a consistent value);
    - plain (`fold` over many events: --resume, `dome status`, replay): mutable copies,
      frozen once at the end, O(events + nodes) for the whole fold. `apply` on a state
      made this way converts it to the persistent form once."""

    FIELDS = ("run_id", "started", "nodes", "executions", "ended", "waves", "total_attempts",
              "lost_attempts", "last_sequence", "finished", "proposals", "proposal_of")
    __slots__ = (*FIELDS, "owned", "persistent")

    def __init__(self, s: RunState, persistent: bool) -> None:
        self.run_id, self.started, self.finished = s.run_id, s.started, s.finished
        self.waves, self.total_attempts, self.last_sequence = s.waves, s.total_attempts, s.last_sequence
        self.lost_attempts = s.lost_attempts
        self.persistent = persistent
        self.owned: set[int] = set()  # trie nodes made by this fold: changed in place (never handed out before freeze)
        if persistent:
            self.nodes, self.executions = _pmap(s.nodes), _pmap(s.executions)
            self.proposal_of = _pmap(s.proposal_of)
            self.ended = s.ended if isinstance(s.ended, PSet) else PSet(s.ended)
            self.proposals = s.proposals if isinstance(s.proposals, PVector) else PVector(s.proposals)
        else:
            self.nodes, self.executions = _Dict(s.nodes), _Dict(s.executions)
            self.proposal_of, self.ended, self.proposals = _Dict(s.proposal_of), _Set(s.ended), _List(s.proposals)

    def freeze(self) -> RunState:
        # every field set at once, without the frozen dataclass's one object.__setattr__ per field
        # (this runs once per appended event)
        out = object.__new__(RunState)
        out.__dict__.update({name: getattr(self, name) for name in self.FIELDS})
        if not self.persistent:
            out.__dict__.update(ended=frozenset(self.ended), proposals=tuple(self.proposals))
        self.owned = set()  # what was handed out is shared from now on: never changed in place
        return out

    def step(self, event: Any) -> None:
        """One event: the only place that says what each topic does to the state."""
        topic = _get(event, "topic")
        payload: Mapping[str, Any] = _get(event, "payload") or {}
        seq = _get(event, "sequence")
        if seq:
            self.last_sequence = max(self.last_sequence, int(seq))
        if topic == RUN_STARTED:
            self.run_id, self.started = _get(event, "run_id"), payload
        elif topic == RUN_FINISHED:
            self.finished = payload
        elif topic == SCHEDULING_DECISION:
            self.waves += 1
        elif topic == TASK_DISPATCHED:
            neid = payload.get("node_execution_id") or _get(event, "node_execution_id")
            node_id = _get(event, "node_id") or payload.get("node_id")
            ns = self.nodes.get(node_id, _NEW)
            self.nodes = self.nodes.set(node_id, NodeState(ns.attempts + 1, ns.failures,
                                                           tuple(sorted((*ns.active, neid))),
                                                           ns.succeeded_by, ns.acked, ns.last_error), self.owned)
            self.executions = self.executions.set(neid, {**payload, "node_id": node_id}, self.owned)
            self.total_attempts += 1
        elif topic in TERMINAL_ATTEMPT_TOPICS:
            neid = payload.get("node_execution_id") or _get(event, "node_execution_id")
            if neid not in self.executions or neid in self.ended:
                return  # a late or duplicate terminal event changes nothing
            node_id = self.executions[neid]["node_id"]
            ns = self.nodes.get(node_id, _NEW)
            succeeded_by, failures, last_error = ns.succeeded_by, ns.failures, ns.last_error
            if topic == TASK_COMPLETED and payload.get("outcome") == "succeeded":
                succeeded_by = succeeded_by or neid
            elif topic in (TASK_FAILED, TASK_TIMEOUT) or topic == TASK_COMPLETED:
                failures += 1
                err = payload.get("error")
                code = err.get("code") if isinstance(err, Mapping) else None
                last_error = str(code) if code else ("TIMEOUT" if topic == TASK_TIMEOUT else None)
            self.nodes = self.nodes.set(node_id, NodeState(ns.attempts, failures,
                                                           tuple(a for a in ns.active if a != neid),
                                                           succeeded_by, ns.acked, last_error), self.owned)
            self.ended = self.ended.add(neid, self.owned)
            self.lost_attempts += topic == TASK_LOST
        elif topic == SANDBOX_VIOLATION:
            # a limit the executor found after the worker reported success: the attempt did not
            # succeed after all (the limits held, the output is not to be trusted). Once acked, the
            # winner's proposal is integrated and the record stands as history.
            neid = payload.get("node_execution_id") or _get(event, "node_execution_id")
            node_id = (self.executions.get(neid) or {}).get("node_id") if neid else None
            ns = self.nodes.get(node_id, _NEW) if node_id is not None else _NEW
            if node_id is not None and ns.succeeded_by == neid and not ns.acked:
                self.nodes = self.nodes.set(node_id, NodeState(ns.attempts, ns.failures + 1, ns.active, None,
                                                               False, SANDBOX_VIOLATION_CODE), self.owned)
        elif topic == TASK_ABANDONED:
            node_id = _get(event, "node_id") or payload.get("node_id")
            ns = self.nodes.get(node_id, _NEW)
            self.nodes = self.nodes.set(node_id, NodeState(ns.attempts, ns.failures, ns.active, ns.succeeded_by,
                                                           ns.acked, str(payload.get("code"))), self.owned)
        elif topic == TASK_ACK:
            node_id = _get(event, "node_id") or payload.get("node_id")
            ns = self.nodes.get(node_id, _NEW)
            self.nodes = self.nodes.set(node_id, NodeState(ns.attempts, ns.failures, ns.active, ns.succeeded_by,
                                                           True, ns.last_error), self.owned)
        elif topic == PATCH_SUBMITTED:
            self.proposals = self.proposals.append(payload)
            neid = payload.get("node_execution_id")
            if neid is not None:
                self.proposal_of = self.proposal_of.set(neid, payload, self.owned)


_NEW = NodeState()


def apply(state: RunState, event: Any) -> RunState:
    """The state after one more event (what the run loop does as it appends): O(log n),
    sharing all but one path of each container with `state`, which is unchanged."""
    work = _Folding(state, persistent=True)
    work.step(event)
    return work.freeze()


def apply_many(state: RunState, events: Iterable[Any]) -> RunState:
    """`apply` of each event in turn, with one copy of the state's fields and one freeze for
    the lot (what the run loop does for a transaction's records): the same state, and
    `state` unchanged."""
    work = _Folding(state, persistent=True)
    for e in events:
        work.step(e)
    return work.freeze()


def fold(events: Iterable[Any], state: RunState | None = None) -> RunState:
    """The state after `events`, in ledger order, starting from `state` (or an empty run).
    The one fold of a run's events: the run loop, --resume, `dome status`, the run
    projection and the replay tests all read a run through it."""
    work = _Folding(state or RunState(), persistent=False)
    step = work.step
    for e in events:
        step(e)
    return work.freeze()
