"""kill -9 of the coordinator at random points, then `dome run --resume`.

Each trial starts a run of a small graph in real bubblewrap sandboxes, kills
the coordinator process (SIGKILL, no cleanup) after a random delay, then
resumes it from the ledger. The run must complete, the whole ledger must
verify, every node must be accepted exactly once, and no idempotency key of
any write may have been executed twice.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from coordinator import runstate as rs
from coordinator.executors.sandbox import probe_bwrap
from tests.conftest import REPO_ROOT, dome_cli
from tests.runloop.conftest import cmd_task, write_queue

TRIALS = int(os.environ.get("DOME_CRASH_TRIALS", "20"))


def _start(queue: Path, ops_root: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen([sys.executable, "-m", "coordinator.cli.main", "run", str(queue), "--ops-root",
                             str(ops_root), "--json"], env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


def check_run(ledger, run_id: str, nodes: list[str]) -> None:
    ev = ledger.events(run_id)
    assert ev[-1].topic == rs.RUN_FINISHED and ev[-1].payload["status"] in ("completed", "promoted", "blocked")
    acks = Counter(e.node_id for e in ev if e.topic == rs.TASK_ACK)
    assert sorted(acks) == sorted(nodes) and set(acks.values()) == {1}
    # the tools' own events: each executed write leaves exactly one (grant.call events record calls, not runs)
    tool_topics = (rs.TASK_PROGRESS, rs.ARTIFACT_PUT, rs.PATCH_SUBMITTED, rs.TASK_COMPLETED)
    keys = Counter((e.payload["method"], e.payload["idempotency_key"]) for e in ev
                   if e.topic in tool_topics and "idempotency_key" in e.payload)
    assert keys and max(keys.values()) == 1, [k for k, n in keys.items() if n > 1]
    proposals = Counter(e.payload["proposal_id"] for e in ev if e.topic == rs.PATCH_SUBMITTED)
    assert max(proposals.values()) == 1
    # every attempt that was in flight at the crash was recorded lost and its grant revoked
    lost = {e.node_execution_id for e in ev if e.topic == rs.TASK_LOST}
    revoked = {e.payload.get("jti") for e in ev if e.topic == "grant.revoked"}
    jti = {e.node_execution_id: e.payload["jti"] for e in ev if e.topic == rs.TASK_DISPATCHED}
    assert all(jti[n] in revoked for n in lost)


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.skipif(not probe_bwrap()[0], reason="bubblewrap cannot create namespaces here")
def test_kill_9_at_random_points_then_resume(git_repo, ops_root, tmp_path):
    from coordinator.keys import load_keyring
    from ledger import Ledger

    tasks = [cmd_task("a", "echo a > a.txt"), cmd_task("b", "echo b > b.txt", ["a"]),
             cmd_task("c", "sleep 1; echo c > c.txt", ["a"]), cmd_task("d", "echo d > d.txt", ["b", "c"]),
             cmd_task("e", "echo e > e.txt")]
    q = write_queue(tmp_path, git_repo, tasks, scheduling={"max_parallel": 2})
    rnd = random.Random(20261122)
    resumed = 0
    ops = ops_root  # one ledger for every trial: the final verify covers them all
    ledger = Ledger.open(None, ops)
    for trial in range(TRIALS):
        before = set(ledger.run_ids())
        p = _start(q, ops)
        if trial % 5 == 0:  # anywhere, startup included
            delay = rnd.uniform(0.2, 4.0)
            try:
                p.wait(delay)
            except subprocess.TimeoutExpired:
                pass
        else:  # at a random point of the run: after its k-th ledger event
            delay = rnd.randint(1, 45)
            deadline = time.monotonic() + 120
            while p.poll() is None and time.monotonic() < deadline:
                new = [r for r in ledger.run_ids() if r not in before]
                if new and ledger.head(new[0]) >= delay:
                    break
                time.sleep(0.02)
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
        p.wait()
        new = [r for r in ledger.run_ids() if r not in before]
        if not new:  # killed before run.started: nothing to resume, start again
            r = dome_cli("run", str(q), "--ops-root", str(ops), "--json", timeout=300)
        else:
            r = dome_cli("run", "--resume", new[0], "--ops-root", str(ops), "--json", timeout=300)
            resumed += 1
        assert r.returncode in (0, 4), (trial, delay, r.stderr[-2000:])
        out = json.loads(r.stdout)
        check_run(ledger, out["run_id"], [t["node_id"] for t in tasks])
        # each trial starts from main again: a target another trial moved is refused at load
        subprocess.run(["git", "update-ref", "-d", "refs/heads/dome/out"], cwd=git_repo, check=True, timeout=30)
    assert ledger.verify(load_keyring(ops)).ok
    v = dome_cli("ledger", "verify", "--ops-root", str(ops))
    assert v.returncode == 0, v.stdout + v.stderr
    assert resumed >= TRIALS * 3 // 4


def test_resume_of_a_finished_run_changes_nothing(git_repo, ops_root, tmp_path, ledger_env):
    from tests.runloop.conftest import run_queue
    q = write_queue(tmp_path, git_repo, [cmd_task("only", "echo x > x.txt")])
    _, out = run_queue(q, ops_root, ledger_env, sandbox="none")
    n = len(ledger_env[0].events(out.run_id))
    r = dome_cli("run", "--resume", out.run_id, "--ops-root", str(ops_root), "--json", "--sandbox", "none")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"] == out.status
    assert len(ledger_env[0].events(out.run_id)) == n
