"""A limit the executor finds after the worker reported success (its sweep of the attempt's
cgroups, once the process has exited) fails that attempt: the node is not acked, its
proposal is not integrated, and the node is tried again like after any failure. The
executor is the real local one; only its sweep's finding is planted (what a background
fork bomb that outlived the worker's own check leaves in the pids counters)."""
from __future__ import annotations

from types import SimpleNamespace

from coordinator import runstate as rs
from coordinator.executors.local import LocalExecutor
from tests.runloop.conftest import cmd_task, run_queue, write_queue

VIOLATION = {"kind": "process_limit", "limit": 64, "refused_forks": 3}


class SweepFinds(LocalExecutor):
    """The local executor whose sweep reports a limit for the first attempt that exits."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.planted: list[str] = []

    def poll(self):
        out = super().poll()
        for ex in out:
            if not self.planted and ex.spawn_error is None:
                self.planted.append(ex.node_execution_id)
                ex.violations.append(dict(VIOLATION))
        return out


def test_a_violation_found_after_a_reported_success_fails_the_attempt(git_repo, ops_root, ledger_env, tmp_path):
    ledger, _, _ = ledger_env
    executor = SweepFinds(sandbox="none", max_concurrency=1)
    tasks = [cmd_task("t", "echo more >> README.md", max_attempts=2)]
    _, out = run_queue(write_queue(tmp_path, git_repo, tasks), ops_root, ledger_env, sandbox="none",
                       executor=executor)
    ev = ledger.events(out.run_id)
    (first,) = executor.planted
    done = {e.node_execution_id: e.payload.get("outcome") for e in ev if e.topic == rs.TASK_COMPLETED}
    assert done.get(first) == "succeeded"  # the worker did report success ...
    seen = [e for e in ev if e.topic == rs.SANDBOX_VIOLATION]
    assert [(e.node_execution_id, e.payload["kind"]) for e in seen] == [(first, "process_limit")]
    acks = [e.payload["node_execution_id"] for e in ev if e.topic == rs.TASK_ACK]
    assert first not in acks  # ... yet it was never accepted
    node = rs.fold(ev).node("t")
    assert node.succeeded_by not in (None, first) and node.failures == 1 and acks == [node.succeeded_by]
    assert out.status in ("completed", "promoted"), out  # the retry's success is the node's

def test_the_fold_turns_a_reported_success_into_a_failure_until_it_is_acked():
    def ev(topic, payload, node_id=None):
        return SimpleNamespace(topic=topic, payload=payload, node_id=node_id, node_execution_id=payload.get(
            "node_execution_id"), sequence=None, run_id="r")
    base = [ev(rs.TASK_DISPATCHED, {"node_execution_id": "ne-1"}, "a"),
            ev(rs.TASK_COMPLETED, {"node_execution_id": "ne-1", "outcome": "succeeded"})]
    bad = ev(rs.SANDBOX_VIOLATION, {"node_execution_id": "ne-1", "kind": "process_limit"})
    st = rs.fold([*base, bad]).node("a")
    assert (st.succeeded, st.failures, st.last_error) == (False, 1, "SANDBOX_VIOLATION")
    acked = rs.fold([*base, ev(rs.TASK_ACK, {"node_execution_id": "ne-1"}, "a"), bad]).node("a")
    assert acked.succeeded and acked.failures == 0  # accepted and integrated: the record stands as history
    other = rs.fold([*base, ev(rs.SANDBOX_VIOLATION, {"node_execution_id": "ne-9", "kind": "memory_limit"})])
    assert other.node("a").succeeded  # a violation of another attempt changes nothing here
    twice = rs.fold([*base, bad, bad]).node("a")
    assert twice.failures == 1  # one attempt fails once
