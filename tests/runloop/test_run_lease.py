"""One coordinator per run: the run lease, with two real `dome run` processes.

A `--resume` of a run whose coordinator is alive is refused with a typed
error and writes nothing; once the lease lapses (its holder stopped renewing
it) the second coordinator takes the run over, and the first one, woken up,
stops without writing. `dome status` derives liveness from the lease.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coordinator import runstate as rs
from tests.conftest import REPO_ROOT, dome_cli
from tests.runloop.conftest import cmd_task, write_queue

pytestmark = pytest.mark.slow  # two real coordinators, each waiting on a sleeping worker


def _start(queue: Path, ops: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen([sys.executable, "-m", "coordinator.cli.main", "run", str(queue), "--ops-root", str(ops),
                             "--json", "--sandbox", "none", *extra], env=env, cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _wait_for(ledger, topic: str, proc: subprocess.Popen, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        for run_id in ledger.run_ids():
            if any(e.topic == topic for e in ledger.events(run_id)):
                return run_id
        time.sleep(0.05)
    raise AssertionError(f"no {topic} within {timeout} s")


def _status(run_id: str, ops: Path) -> dict:
    r = dome_cli("status", run_id, "--ops-root", str(ops), "--json", timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_resume_of_a_live_run_is_refused_and_writes_nothing(git_repo, ops_root, tmp_path, ledger_env):
    ledger = ledger_env[0]
    q = write_queue(tmp_path, git_repo, [cmd_task("slow", "sleep 12; echo s > s.txt")],
                    scheduling={"max_parallel": 1})
    a = _start(q, ops_root)
    try:
        run_id = _wait_for(ledger, rs.TASK_DISPATCHED, a)
        assert _status(run_id, ops_root)["status"] == "running"
        before = ledger.head(run_id)
        b = dome_cli("run", "--resume", run_id, "--ops-root", str(ops_root), "--json", "--sandbox", "none",
                     timeout=60)
        assert b.returncode == 3, b.stdout + b.stderr
        err = json.loads(b.stdout)["error"]
        assert err["code"] == "RUN_LEASE_HELD" and err["details"]["pid"] == a.pid
        out, errout = a.communicate(timeout=120)
    finally:
        if a.poll() is None:
            os.killpg(a.pid, signal.SIGKILL)
    assert a.returncode in (0, 4), errout[-2000:]  # blocked: the queue names no validation suite
    ev = ledger.events(run_id)
    topics = [e.topic for e in ev]
    # the refused resume wrote nothing: no resume, no lost attempt, no revoked grant
    assert rs.RUN_RESUMED not in topics and rs.TASK_LOST not in topics and "grant.revoked" not in topics
    assert before <= len(ev) and topics.count(rs.RUN_FINISHED) == 1
    assert json.loads(out)["status"] in ("promoted", "blocked")


def test_a_stalled_coordinator_loses_the_run_and_stops_without_writing(git_repo, ops_root, tmp_path,
                                                                       ledger_env):
    ledger, _, keyring = ledger_env
    q = write_queue(tmp_path, git_repo, [cmd_task("slow", "sleep 4; echo s > s.txt")],
                    scheduling={"max_parallel": 1})
    a = _start(q, ops_root, "--lease-ttl", "1.5")
    try:
        run_id = _wait_for(ledger, rs.TASK_DISPATCHED, a)
        os.kill(a.pid, signal.SIGSTOP)  # hung, not dead: only the lease's expiry frees the run
        time.sleep(2.0)
        st = _status(run_id, ops_root)
        assert st["status"] == "stalled" and st["next_step"] == f"dome run --resume {run_id}"
        assert st["lease"]["pid"] == a.pid and st["lease"]["live"] is False
        human = dome_cli("status", run_id, "--ops-root", str(ops_root))
        assert "stalled" in human.stdout and f"dome run --resume {run_id}" in human.stdout
        b = dome_cli("run", "--resume", run_id, "--ops-root", str(ops_root), "--json", "--sandbox", "none",
                     timeout=120)
        assert b.returncode in (0, 4), b.stderr[-2000:]
        assert json.loads(b.stdout)["status"] in ("promoted", "blocked")
        n = ledger.head(run_id)
        os.kill(a.pid, signal.SIGCONT)
        out, errout = a.communicate(timeout=60)
    finally:
        if a.poll() is None:
            os.killpg(a.pid, signal.SIGKILL)
    assert a.returncode == 3, errout[-2000:]
    assert json.loads(out)["error"]["code"] == "RUN_LEASE_LOST"
    ev = ledger.events(run_id)
    assert len(ev) == n and ev[-1].topic == rs.RUN_FINISHED  # the first coordinator wrote nothing after
    assert [e.topic for e in ev].count(rs.RUN_FINISHED) == 1
    assert ledger.verify(keyring).ok
    assert _status(run_id, ops_root)["status"] in ("promoted", "blocked")


def test_status_of_a_killed_run_says_stalled_and_how_to_resume(git_repo, ops_root, tmp_path, ledger_env):
    ledger = ledger_env[0]
    q = write_queue(tmp_path, git_repo, [cmd_task("slow", "sleep 30")])
    a = _start(q, ops_root)  # the default 30 s lease: on this host a dead pid frees it at once
    try:
        run_id = _wait_for(ledger, rs.TASK_DISPATCHED, a)
    finally:
        os.killpg(a.pid, signal.SIGKILL)
        a.wait()
    st = _status(run_id, ops_root)
    assert st["status"] == "stalled" and st["next_step"] == f"dome run --resume {run_id}"
    every = json.loads(dome_cli("status", "--ops-root", str(ops_root), "--json").stdout)["runs"]
    assert [r["status"] for r in every if r["run_id"] == run_id] == ["stalled"]
