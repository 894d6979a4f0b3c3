"""Sandbox gaps, tried as an attacker would, with real bubblewrap (and Landlock where the kernel has it):
the runtime's git runs nothing the action planted, /tmp and the scratch checkout are bounded,
hitting a limit fails the attempt with SANDBOX_VIOLATION, and attempt directories (with the
attempt's private key) do not outlive their attempts."""
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
from coordinator.executors.sandbox import probe_bwrap
from tests.conftest import REPO_ROOT
from tests.runloop.conftest import cmd_task, run_queue, write_queue
from tests.attacks import attack

if not probe_bwrap()[0]:
    if os.environ.get("CI"):
        pytest.fail("bubblewrap cannot create namespaces here", pytrace=False)
    pytest.skip("bubblewrap cannot create namespaces here", allow_module_level=True)

PLANT = r"""
cat > .git/mon.sh <<'EOF'
#!/bin/sh
echo escaped > /dome/scratch/escaped 2>/dev/null
echo ran > /dome/scratch/repo/FSMON_RAN
EOF
chmod +x .git/mon.sh
mkdir -p .git/hooks && cp .git/mon.sh .git/hooks/pre-commit && cp .git/mon.sh .git/hooks/post-index-change
git config core.fsmonitor /dome/scratch/repo/.git/mon.sh
git config core.hooksPath /dome/scratch/repo/.git/hooks
git config diff.external /dome/scratch/repo/.git/mon.sh
git config filter.evil.clean /dome/scratch/repo/.git/mon.sh
printf '[core]\n\tfsmonitor = /dome/scratch/repo/.git/mon.sh\n' > .git/extra.cfg
git config include.path extra.cfg
mkdir -p .git/info && echo '* filter=evil diff=evil' > .git/info/attributes
echo legit > legit.txt
"""


def _ended(ev, node: str):
    ends = [e for e in ev if e.node_id == node and e.topic in (rs.TASK_COMPLETED, rs.TASK_FAILED, rs.TASK_TIMEOUT)]
    assert len(ends) == 1, [e.topic for e in ev if e.node_id == node]
    return ends[0]


def _violation(ev, node: str) -> str:
    """The attempt failed with SANDBOX_VIOLATION (reported by the worker or recorded by the executor)."""
    end = _ended(ev, node)
    assert not (end.topic == rs.TASK_COMPLETED and end.payload.get("outcome") == "succeeded"), end.payload
    recorded = [e.payload.get("kind") for e in ev if e.node_id == node and e.topic == rs.SANDBOX_VIOLATION]
    blob = json.dumps(end.payload)
    assert "SANDBOX_VIOLATION" in blob or recorded, blob[-2000:]
    return blob + json.dumps(recorded)


@attack("sandbox-git-config")
def test_planted_git_config_and_hooks_never_run_in_the_runtime(git_repo, ops_root, ledger_env, tmp_path):
    """The action writes core.fsmonitor, hooksPath, include.path, a filter and an external diff into
    its checkout's .git; the runtime stages and diffs the checkout afterwards without running any of it."""
    ledger, _, _ = ledger_env
    q = write_queue(tmp_path, git_repo, [cmd_task("plant", PLANT, max_attempts=1)],
                    scheduling={"endgame_max_duplicates": 0})
    _, out = run_queue(q, ops_root, ledger_env, sandbox="bwrap")
    ev = ledger.events(out.run_id)
    end = _ended(ev, "plant")
    assert end.topic == rs.TASK_COMPLETED and end.payload["outcome"] == "succeeded", end.payload
    proposals = [e.payload for e in ev if e.topic == rs.PATCH_SUBMITTED]
    assert len(proposals) == 1
    touched = proposals[0]["touched_files"]
    assert "FSMON_RAN" not in touched  # the marker the planted hook would write: it never ran
    assert touched == ["legit.txt"]


def _limits_queue(tmp_path, git_repo, tasks):
    return write_queue(tmp_path, git_repo, tasks, limits={"memory_mb": 512, "tmp_mb": 32, "disk_mb": 32,
                                                          "max_processes": 48},
                       scheduling={"max_parallel": 2, "endgame_max_duplicates": 0})


@attack("sandbox-exhaustion")
def test_tmp_and_scratch_are_bounded_and_exceeding_them_is_a_violation(git_repo, ops_root, ledger_env, tmp_path):
    """96 MiB written to $TMPDIR under a 32 MiB tmp limit, and to the checkout under a 32 MiB disk
    limit: the writes stop at the limit and each attempt fails with SANDBOX_VIOLATION; an honest
    attempt under the same limits succeeds."""
    ledger, _, _ = ledger_env
    fill = "dd if=/dev/zero of={} bs=1M count=96 2>&1; echo dd=$?; true"
    tasks = [cmd_task("fill-tmp", fill.format('"$TMPDIR/big"'), outputs=(), max_attempts=1),
             cmd_task("fill-scratch", fill.format("big.bin"), outputs=(), max_attempts=1),
             cmd_task("honest", "head -c 1048576 /dev/zero > small.bin", max_attempts=1)]
    _, out = run_queue(_limits_queue(tmp_path, git_repo, tasks), ops_root, ledger_env, sandbox="bwrap")
    ev = ledger.events(out.run_id)
    assert "tmp_limit" in _violation(ev, "fill-tmp")
    assert "disk_limit" in _violation(ev, "fill-scratch")
    honest = _ended(ev, "honest")
    assert honest.topic == rs.TASK_COMPLETED and honest.payload["outcome"] == "succeeded", honest.payload
    assert [e.node_id for e in ev if e.topic == rs.PATCH_SUBMITTED] == ["honest"]


def _needs_cgroup(kind: str) -> None:
    from coordinator.executors.sandbox import memory_cgroup_parent, pids_cgroup_parent

    if (pids_cgroup_parent() if kind == "pids" else memory_cgroup_parent()) is None:
        msg = f"this host does not let dome create a {kind} cgroup"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)


@attack("sandbox-exhaustion")
def test_fork_bomb_held_by_the_pids_cgroup_fails_with_sandbox_violation(git_repo, ops_root, ledger_env, tmp_path):
    """A fork bomb the pids limit held, in an action that then exits 0, is not `succeeded`."""
    _needs_cgroup("pids")
    ledger, _, _ = ledger_env
    tasks = [cmd_task("fork-bomb", "i=0; while [ $i -lt 200 ]; do (sleep 5 &) 2>/dev/null; i=$((i+1)); done; "
                                   "echo done", outputs=(), max_attempts=1, timeout_s=60)]
    _, out = run_queue(_limits_queue(tmp_path, git_repo, tasks), ops_root, ledger_env, sandbox="bwrap")
    assert "process_limit" in _violation(ledger.events(out.run_id), "fork-bomb")


@attack("sandbox-exhaustion")
def test_memory_past_the_memory_cgroup_fails_with_sandbox_violation(git_repo, ops_root, ledger_env, tmp_path):
    """768 MiB touched under memory_mb 512: the kernel kills the process; the action exits 0 anyway,
    and the attempt still fails with SANDBOX_VIOLATION."""
    _needs_cgroup("memory")
    ledger, _, _ = ledger_env
    tasks = [cmd_task("memory-hog", "python3 -c \"b = b'x' * (768 << 20); print(len(b))\"; true",
                      outputs=(), max_attempts=1)]
    _, out = run_queue(_limits_queue(tmp_path, git_repo, tasks), ops_root, ledger_env, sandbox="bwrap")
    assert "memory_limit" in _violation(ledger.events(out.run_id), "memory-hog")


COORDINATOR = """
import sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from coordinator.keys import load_keyring, load_or_create_signing_key
from coordinator.runloop.loop import RunContext, RunLoop
from ledger import Ledger
ops = Path({ops!r})
ctx = RunContext(ledger=Ledger.open(None, ops), ops_root=ops, signer=load_or_create_signing_key(ops),
                 keyring=load_keyring(ops), sandbox="bwrap")
loop = RunLoop.start({queue!r}, ctx)
print(loop.run_id, flush=True)
loop.run()
"""


@attack("key-leftover")
def test_attempt_dirs_and_worker_keys_do_not_outlive_attempts(git_repo, ops_root, tmp_path):
    """An attempt that ended leaves no directory; a running attempt's key is inside its sandbox
    only (no host file); after kill -9 of the coordinator mid-attempt, sweep_attempt_dirs(run_id)
    removes what is left (the attempt's log)."""
    from coordinator.executors.attempts import attempt_roots, sweep_attempt_dirs
    from ledger import Ledger

    q = write_queue(tmp_path, git_repo, [cmd_task("quick", "echo q > q.txt", max_attempts=1),
                                         cmd_task("slow", "test -s /dome/worker.key && sleep 60", ["quick"],
                                                  max_attempts=1)],
                    scheduling={"endgame_max_duplicates": 0})
    proc = subprocess.Popen([sys.executable, "-c", COORDINATOR.format(root=str(REPO_ROOT), ops=str(ops_root),
                                                                        queue=str(q))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run_id = proc.stdout.readline().strip()
        assert run_id.startswith("run-"), proc.stderr.read()[-2000:] if proc.poll() is not None else run_id
        deadline = time.monotonic() + 120
        slow = None
        with Ledger.open(None, ops_root) as ledger:  # a reader beside the coordinator's writer
            while time.monotonic() < deadline and slow is None:
                neids = [e.node_execution_id for e in ledger.events(run_id)
                         if e.topic == "task.dispatched" and e.node_id == "slow"]
                logs = [p for root in attempt_roots(run_id) for p in root.glob("attempts/*")]
                if neids and [p.name for p in logs] == [f"{neids[0]}.log"]:
                    slow = logs[0]  # `quick` ended: its files are gone; `slow` is running
                time.sleep(0.05)
        assert slow is not None, "the slow attempt never started alone"
        time.sleep(1.0)  # well into the attempt (it checked its key and sleeps)
        # the spawn spec, task facts and key were handed over in memory: no file of them on the host
        left = [p for root in attempt_roots(run_id) for p in root.rglob("*")]
        assert not [p for p in left if p.name in ("worker.key", "spawn.json", "task.json")], left
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert slow.exists()  # kill -9: nothing could clean up (the attempt's log)
    removed = sweep_attempt_dirs(run_id)
    assert removed and not attempt_roots(run_id) and not slow.exists()
    assert sweep_attempt_dirs(run_id) == []  # idempotent
    # the killed coordinator's cgroups: the next executor kills what is left in them and removes them
    from coordinator.executors.local import LocalExecutor, _slot_prefix
    from coordinator.executors.sandbox import memory_cgroup_parent, pids_cgroup_parent

    parents = [p for p in (pids_cgroup_parent(), (memory_cgroup_parent() or (None,))[0]) if p is not None]
    theirs = _slot_prefix(proc.pid)
    slots = [c for p in parents for c in p.iterdir() if c.name.startswith(theirs)]
    assert slots  # the run had cgroups
    # what an attempt may leave running when its coordinator dies (a sandbox's outer process, say)
    stray = subprocess.Popen(["sleep", "300"])
    try:
        for cg in slots:
            (cg / "cgroup.procs").write_text(str(stray.pid))
        LocalExecutor(sandbox="bwrap").shutdown()
        assert stray.wait(10) == -signal.SIGKILL
    finally:
        stray.kill()
    assert [c.name for p in parents for c in p.iterdir() if c.name.startswith(theirs)] == []


@attack("sandbox-exhaustion")
def test_a_reused_cgroup_judges_each_attempt_on_what_it_did(git_repo, ops_root, ledger_env, tmp_path):
    """The executor hands an attempt's emptied cgroups to the next attempt. A fork bomb held by the
    pids limit, then two honest attempts in the same groups (one at a time): the bomb is a
    SANDBOX_VIOLATION, and the honest ones succeed, though the groups' counters still hold the bomb's
    refused forks (neither the worker nor the executor counts them against a later attempt)."""
    _needs_cgroup("pids")
    ledger, _, _ = ledger_env
    bomb = "i=0; while [ $i -lt 200 ]; do (sleep 5 &) 2>/dev/null; i=$((i+1)); done; echo done"
    tasks = [cmd_task("a-bomb", bomb, outputs=(), max_attempts=1, timeout_s=60),
             cmd_task("b-honest", "echo b > b.txt", max_attempts=1),
             cmd_task("c-honest", "echo c > c.txt", max_attempts=1)]
    q = write_queue(tmp_path, git_repo, tasks, limits={"memory_mb": 512, "tmp_mb": 32, "disk_mb": 32,
                                                       "max_processes": 48},
                    scheduling={"max_parallel": 1, "endgame_max_duplicates": 0})
    _, out = run_queue(q, ops_root, ledger_env, sandbox="bwrap")
    ev = ledger.events(out.run_id)
    order = [e.node_id for e in ev if e.topic == rs.TASK_DISPATCHED]
    assert order[0] == "a-bomb", order  # the honest attempts ran after it, in its groups
    assert "process_limit" in _violation(ev, "a-bomb")
    for node in ("b-honest", "c-honest"):
        end = _ended(ev, node)
        assert end.topic == rs.TASK_COMPLETED and end.payload["outcome"] == "succeeded", end.payload
        assert not [e for e in ev if e.node_id == node and e.topic == rs.SANDBOX_VIOLATION]


def test_a_run_leaves_none_of_its_cgroups_behind(git_repo, ops_root, ledger_env, tmp_path):
    """After a run of several attempts, at most two at a time, no cgroup of the executor is left
    on the host: the slots are removed at shutdown, waiting out the moment in which the kernel
    still holds a group whose last process has just exited."""
    from coordinator.executors.local import _slot_prefix
    from coordinator.executors.sandbox import memory_cgroup_parent, pids_cgroup_parent

    _needs_cgroup("pids")
    parents = [p for p in (pids_cgroup_parent(), (memory_cgroup_parent() or (None,))[0]) if p is not None]
    mine = _slot_prefix(os.getpid())
    tasks = [cmd_task(f"t{i}", f"echo {i} > f{i}.txt", max_attempts=1) for i in range(6)]
    q = write_queue(tmp_path, git_repo, tasks, scheduling={"max_parallel": 2, "endgame_max_duplicates": 0})
    _, out = run_queue(q, ops_root, ledger_env, sandbox="bwrap")
    assert out.counts.get("succeeded") == 6, out
    left = [c.name for p in parents for c in p.iterdir() if c.name.startswith(mine)]
    assert left == []


def test_the_worker_counts_only_what_its_own_attempt_added(tmp_path):
    """In a reused cgroup the counters hold earlier attempts' events: the budget's `counted` is
    subtracted, so equal counters are no violation and a larger one is, by the difference."""
    from worker_sdk.sandbox_limits import violations

    (tmp_path / "pids").mkdir()
    (tmp_path / "memory").mkdir()
    (tmp_path / "pids" / "pids.events").write_text("max 7\n")
    (tmp_path / "memory" / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n")
    budget = {"max_processes": 48, "memory_mb": 512, "cgroup_root": str(tmp_path)}
    kinds = {v["kind"]: v for v in violations({**budget, "counted": {"refused_forks": 7, "oom_kills": 2}},
                                              tmp=str(tmp_path), scratch=str(tmp_path))}
    assert "process_limit" not in kinds and "memory_limit" not in kinds
    kinds = {v["kind"]: v for v in violations({**budget, "counted": {"refused_forks": 4, "oom_kills": 2}},
                                              tmp=str(tmp_path), scratch=str(tmp_path))}
    assert kinds["process_limit"]["refused_forks"] == 3 and "memory_limit" not in kinds
    kinds = {v["kind"]: v for v in violations(budget, tmp=str(tmp_path), scratch=str(tmp_path))}
    assert kinds["process_limit"]["refused_forks"] == 7 and kinds["memory_limit"]["oom_kills"] == 2
