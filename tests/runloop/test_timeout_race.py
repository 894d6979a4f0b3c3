"""A hung attempt is the coordinator's to time out: the worker's own deadline never wins the race.

A coordinator slowed by load ticks late. If the worker stopped its own action at `timeout_s`, it
would report a plain failure before the coordinator looked, and the ledger would say "failed" for
what was a timeout (the 50-node run saw this on a loaded CI machine).
"""
from __future__ import annotations

import pytest

from coordinator import runstate as rs
from coordinator.executors.sandbox import probe_bwrap
from coordinator.runloop import loop as loop_mod
from tests.runloop.conftest import cmd_task, run_queue, write_queue

pytestmark = pytest.mark.skipif(not probe_bwrap()[0], reason="bubblewrap cannot create namespaces here")


def test_a_hung_attempt_under_a_slow_coordinator_is_recorded_as_a_timeout(git_repo, ops_root, ledger_env,
                                                                            tmp_path, monkeypatch):
    # ticks 1.5 s apart: the 2 s deadline is seen at the 3 s tick, well after the worker's own
    # 2 s would have passed (a worker's result wakes the loop at once, whatever the tick)
    monkeypatch.setattr(loop_mod, "TICK_S", 1.5)
    q = write_queue(tmp_path, git_repo,
                    [cmd_task("hang", "sleep 1000", timeout_s=2, max_attempts=1, endgame_duplicates=0)])
    loop, out = run_queue(q, ops_root, ledger_env, sandbox="bwrap")
    ledger = ledger_env[0]
    ev = [e for e in ledger.events(out.run_id) if e.node_id == "hang"]
    ends = [(e.topic, e.payload.get("reason"), e.payload.get("outcome")) for e in ev
            if e.topic in rs.TERMINAL_ATTEMPT_TOPICS]
    assert ends == [(rs.TASK_TIMEOUT, "wall-clock timeout", None)], ends


def test_a_worker_its_coordinator_never_reaches_stops_itself_soon_after_its_deadline(
        git_repo, ops_root, ledger_env, tmp_path, monkeypatch):
    # the coordinator's first look after the 1 s deadline is at the 10 s tick; the worker, left
    # alone until then, must have stopped itself and said why (a backstop that never fires would
    # leave the coordinator's task.timeout instead)
    monkeypatch.setattr(loop_mod, "TICK_S", 10.0)
    q = write_queue(tmp_path, git_repo,
                    [cmd_task("hang", "sleep 1000", timeout_s=1, max_attempts=1, endgame_duplicates=0)])
    loop, out = run_queue(q, ops_root, ledger_env, sandbox="bwrap")
    ev = [e for e in ledger_env[0].events(out.run_id) if e.node_id == "hang"]
    ends = [e for e in ev if e.topic in rs.TERMINAL_ATTEMPT_TOPICS]
    assert [(e.topic, e.payload.get("outcome")) for e in ends] == [(rs.TASK_COMPLETED, "failed")]
    assert "deadline exceeded" in str(ends[0].payload.get("error")), ends[0].payload
