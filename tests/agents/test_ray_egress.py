"""Agent workers run by the Ray executor reach the model through the same egress
gate: a local Ray on the coordinator's host, real bubblewrap, the OpenAI SDK in the
worker, the scripted endpoint on loopback, the ledger metering every call. Once with
the attempt's files on the coordinator's disk, once as for other hosts (the gate over
the run's TLS listener, through the node relay's egress socket)."""
from __future__ import annotations

import pytest

from coordinator import runstate as rs
from coordinator.egress import metering as mt
from coordinator.runloop.finish import integration_finish
from tests.agents.helpers import load_scripted_llm, scripted_egress
from tests.agents.test_agent_run import SCRIPT, _agent_task, needs_bwrap
from tests.conftest import git
from tests.runloop.conftest import run_queue, write_queue


@needs_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("gateway_bind", [None, "127.0.0.1"], ids=["one-host", "tls-relay"])
def test_ray_executed_agents_reach_the_gate_and_stay_typed(git_repo, ops_root, ledger_env, tmp_path, monkeypatch,
                                                           gateway_bind):
    ray = pytest.importorskip("ray")
    from coordinator.executors.base import Limits
    from coordinator.executors.ray_executor import RayExecutor

    ledger = ledger_env[0]
    llm = load_scripted_llm()(SCRIPT).start()
    egress, key = scripted_egress(llm, monkeypatch)
    tasks = [_agent_task("fix-readme", "fix-readme"),
             _agent_task("greedy", "greedy", budgets={"max_tokens": 6000})]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        ex = RayExecutor(sandbox="bwrap", max_concurrency=2, limits=Limits(), gateway_bind=gateway_bind)
        assert ex.node_id == ray.get_runtime_context().get_node_id()  # attempts are pinned to this host
        q = write_queue(tmp_path, git_repo, tasks, if_tasks_fail="promote_rest",
                        scheduling={"max_parallel": 2, "endgame_max_duplicates": 0})
        _, out = run_queue(q, ops_root, ledger_env, sandbox="bwrap", executor=ex, executor_kind="ray",
                           egress=egress, finish=integration_finish)
    finally:
        ray.shutdown()
        llm.stop()
    ev = ledger.events(out.run_id)
    assert all(e.payload["executor"] == "ray" for e in ev if e.topic == rs.TASK_DISPATCHED)
    # the Ray-run agent's model calls went through the gate (metered, keyed) and its fix was promoted
    assert out.status == "promoted", [e.payload for e in ev if e.topic == rs.TASK_COMPLETED]
    assert git(git_repo, "show", f"{out.promoted_ref}:README.md") == "hello, agents"
    calls = [e for e in ev if e.topic == mt.CALL_TOPIC]
    assert {c.node_id for c in calls} == {"fix-readme", "greedy"}
    assert len(calls) == len(llm.requests) and all(r["headers"]["authorization"] == f"Bearer {key}"
                                                    for r in llm.requests)
    # the budget holds under Ray too: a typed stop, the run partial without it
    greedy = [e.payload for e in ev if e.node_id == "greedy" and e.topic == rs.TASK_COMPLETED]
    assert [g["error"]["code"] for g in greedy] == ["BUDGET_EXHAUSTED"]
    fin = [e.payload for e in ev if e.topic == rs.RUN_FINISHED][-1]
    assert fin["partial"] is True and fin["tasks_not_landed"] == [{"node_id": "greedy", "status": "failed"}]
    assert key.encode() not in b"".join(p.read_bytes() for p in ops_root.rglob("*") if p.is_file())
