"""The run's retry budget (`budgets.max_retries`) ends a run instead of wedging it.

A node whose own `max_attempts` would allow another try, in a run whose retry
budget is spent, can never be dispatched again. The loop records that
decision (`task.abandoned`, RETRY_BUDGET_EXHAUSTED) and the node counts as
failed, so the run finishes. Before, the loop waited for a dispatch that
could never come. The decision is a pure function of the statuses, the state
and the policy; the run is real (SQLite ledger, git, workers)."""
from __future__ import annotations

import threading
from types import SimpleNamespace

from coordinator import runstate as rs
from coordinator.scheduler import RETRY_BUDGET_EXHAUSTED, SchedulerPolicy, stranded, status_of
from coordinator.workgraph import Node
from tests.runloop.conftest import cmd_task, topics, write_queue


def _state(total: int, lost: int = 0):
    return SimpleNamespace(total_attempts=total, lost_attempts=lost)


def test_only_a_spent_budget_strands_the_ready_nodes():
    status = {"a": "ready", "b": "running", "c": "failed", "d": "ready"}
    spent = SchedulerPolicy(max_parallel=4, max_total_attempts=3)
    assert stranded(status, _state(3), spent) == ["a", "d"]
    assert stranded(status, _state(2), spent) == []  # one attempt left: a node can still go
    assert stranded(status, _state(3, lost=1), spent) == []  # a lost attempt costs the tasks nothing
    assert stranded(status, _state(99), SchedulerPolicy(max_parallel=4)) == []  # no budget: never


def test_an_abandoned_node_is_failed_and_blocks_its_dependents():
    st = rs.fold([{"topic": rs.TASK_ABANDONED, "node_id": "a", "payload": {"node_id": "a",
                                                                          "code": RETRY_BUDGET_EXHAUSTED}}])
    node = SimpleNamespace(max_attempts=3, dependencies=())
    assert status_of(node, st.node("a"), {}) == "failed"
    child = SimpleNamespace(max_attempts=3, dependencies=("a",))
    assert status_of(child, st.node("b"), {"a": "failed"}) == "blocked"
    assert Node  # the real class the SimpleNamespace stands for


def test_a_spent_retry_budget_ends_the_run_with_the_node_abandoned(tmp_path, git_repo, ops_root, ledger_env):
    tasks = [cmd_task("good", "echo a > A.txt"), cmd_task("boom", "exit 3", max_attempts=3),
             cmd_task("after", "echo b > B.txt", deps=("boom",))]
    q = write_queue(tmp_path, git_repo, tasks, if_tasks_fail="promote_rest", budgets={"max_retries": 0},
                    scheduling={"max_parallel": 2})
    from coordinator.runloop.finish import integration_finish
    from coordinator.runloop.loop import RunContext, RunLoop

    ledger, signer, keyring = ledger_env
    loop = RunLoop.start(q, RunContext(ledger=ledger, ops_root=ops_root, signer=signer, keyring=keyring,
                                       sandbox="none", finish=integration_finish))
    watchdog = threading.Timer(90, loop.cancel, args=("the run wedged: test watchdog",))
    watchdog.start()
    try:
        out = loop.run()
    finally:
        watchdog.cancel()
    events = ledger.events(out.run_id)
    abandoned = [e for e in events if e.topic == rs.TASK_ABANDONED]
    assert [(e.node_id, e.payload["code"]) for e in abandoned] == [("boom", RETRY_BUDGET_EXHAUSTED)]
    # the budget is one pool of len(tasks) + max_retries = 3 attempts: `after` never ran, so
    # `boom` had a second try, and a third one its max_attempts allows has no budget left
    assert abandoned[0].payload["failures"] == 2 and abandoned[0].payload["max_attempts"] == 3
    dispatched = [e.node_id for e in events if e.topic == rs.TASK_DISPATCHED]
    assert sorted(dispatched) == ["boom", "boom", "good"]
    assert out.status == "promoted"  # promote_rest lands `good`
    fin = [e.payload for e in events if e.topic == rs.RUN_FINISHED]
    assert [t["node_id"] for t in fin[0]["tasks_not_landed"]] == ["after", "boom"]
    assert topics(ledger, out.run_id)[-1] != rs.TASK_ABANDONED  # the run went on to its end

