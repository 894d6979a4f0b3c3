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

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

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
PATCH_SUBMITTED = "patch.submitted"
ARTIFACT_PUT = "artifact.put"
SANDBOX_VIOLATION = "sandbox.violation"

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
    nodes: Mapping[str, NodeState] = field(default_factory=dict)
    executions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # neid -> dispatch payload
    ended: frozenset[str] = frozenset()
    waves: int = 0
    total_attempts: int = 0
    last_sequence: int = 0
    finished: Mapping[str, Any] | None = None
    proposals: tuple[Mapping[str, Any], ...] = ()

    def node(self, node_id: str) -> NodeState:
        return self.nodes.get(node_id, NodeState())

    def active_executions(self) -> list[str]:
        return sorted(e for e in self.executions if e not in self.ended)


def _get(event: Any, name: str) -> Any:
    if isinstance(event, Mapping):
        return event.get(name)
    return getattr(event, name, None)


def apply(state: RunState, event: Any) -> RunState:
    topic = _get(event, "topic")
    payload: Mapping[str, Any] = _get(event, "payload") or {}
    seq = _get(event, "sequence") or state.last_sequence
    state = replace(state, last_sequence=max(state.last_sequence, int(seq)))
    if topic == RUN_STARTED:
        return replace(state, run_id=_get(event, "run_id"), started=payload)
    if topic == RUN_FINISHED:
        return replace(state, finished=payload)
    if topic == SCHEDULING_DECISION:
        return replace(state, waves=state.waves + 1)
    neid = payload.get("node_execution_id") or _get(event, "node_execution_id")
    node_id = _get(event, "node_id") or payload.get("node_id")
    if topic == TASK_DISPATCHED:
        ns = state.node(node_id)
        ns = replace(ns, attempts=ns.attempts + 1, active=tuple(sorted((*ns.active, neid))))
        return replace(state, nodes={**state.nodes, node_id: ns},
                       executions={**state.executions, neid: {**payload, "node_id": node_id}},
                       total_attempts=state.total_attempts + 1)
    if topic in TERMINAL_ATTEMPT_TOPICS:
        if neid not in state.executions or neid in state.ended:
            return state  # a late or duplicate terminal event changes nothing
        node_id = state.executions[neid]["node_id"]
        ns = state.node(node_id)
        ns = replace(ns, active=tuple(a for a in ns.active if a != neid))
        if topic == TASK_COMPLETED and payload.get("outcome") == "succeeded":
            if ns.succeeded_by is None:
                ns = replace(ns, succeeded_by=neid)
        elif topic in (TASK_FAILED, TASK_TIMEOUT) or (
                topic == TASK_COMPLETED and payload.get("outcome") != "succeeded"):
            err = payload.get("error")
            code = err.get("code") if isinstance(err, Mapping) else None
            ns = replace(ns, failures=ns.failures + 1,
                         last_error=str(code) if code else ("TIMEOUT" if topic == TASK_TIMEOUT else None))
        return replace(state, nodes={**state.nodes, node_id: ns}, ended=state.ended | {neid})
    if topic == TASK_ACK:
        ns = state.node(node_id)
        return replace(state, nodes={**state.nodes, node_id: replace(ns, acked=True)})
    if topic == PATCH_SUBMITTED:
        return replace(state, proposals=(*state.proposals, payload))
    return state


def fold(events: Iterable[Any], state: RunState | None = None) -> RunState:
    state = state or RunState()
    for e in events:
        state = apply(state, e)
    return state
