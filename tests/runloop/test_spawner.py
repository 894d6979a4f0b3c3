"""Workers start off the run loop's thread: the local executor queues each start for a
spawner thread. A kill of an attempt still queued means it never starts; a start that
fails is recorded as the attempt's typed failure, as when the spawn ran on the loop."""
from __future__ import annotations

import threading
import time
from pathlib import Path

from coordinator.executors import local as local_mod
from coordinator.executors.base import AttemptFiles
from coordinator.executors.local import LocalExecutor
from tests.runloop.conftest import cmd_task, run_queue, write_queue


def _files(tmp: Path, neid: str) -> AttemptFiles:
    adir = tmp / neid
    (adir / "scratch").mkdir(parents=True)
    return AttemptFiles(spawn_json=adir / "spawn.json", scratch=adir / "scratch", base_git=tmp / "base.git",
                        gateway_socket=tmp / "gw.sock", coordinator_pub=tmp / "pub", log_dir=adir / "logs")


def _wait_exits(ex: LocalExecutor, want: int, timeout: float = 30.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < want:
        assert time.monotonic() < deadline, out
        out += ex.poll()
        time.sleep(0.02)
    return out


def test_a_kill_of_a_queued_start_means_it_never_starts(tmp_path: Path, monkeypatch) -> None:
    marker = tmp_path / "ran"
    monkeypatch.setattr(local_mod, "direct_argv", lambda files: ["/bin/sh", "-c", f"touch {marker}"])
    ex = LocalExecutor(sandbox="none", max_concurrency=2)
    gate = threading.Event()
    ex.spawner.submit(gate.wait)  # the one spawner thread is busy: the next start stays queued
    try:
        ex.dispatch({"node_execution_id": "ne-queued"}, _files(tmp_path, "ne-queued"))
        assert ex.running() == ["ne-queued"]  # in flight for the run loop while it waits
        ex.kill("ne-queued", "timeout")
        gate.set()
        (exit_,) = _wait_exits(ex, 1)
        assert exit_.node_execution_id == "ne-queued" and exit_.returncode is None and exit_.signal == 9
        assert exit_.spawn_error is None
        time.sleep(0.5)
        assert not marker.exists(), "a start killed while queued ran anyway"
        assert ex.running() == []
    finally:
        gate.set()
        ex.shutdown()


def test_a_started_worker_is_killed_and_reaped_as_before(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(local_mod, "direct_argv", lambda files: ["/bin/sh", "-c", "exec sleep 60"])
    ex = LocalExecutor(sandbox="none", max_concurrency=2)
    try:
        ex.dispatch({"node_execution_id": "ne-sleep"}, _files(tmp_path, "ne-sleep"))
        deadline = time.monotonic() + 20
        while ex._procs["ne-sleep"].state != "started":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        ex.kill("ne-sleep", "timeout")
        (exit_,) = _wait_exits(ex, 1)
        assert exit_.signal == 9 and exit_.spawn_error is None
    finally:
        ex.shutdown()


def test_a_failed_spawn_is_the_typed_dispatch_failure_and_nothing_else(git_repo, ops_root, ledger_env, tmp_path,
                                                                        monkeypatch) -> None:
    """The launcher cannot be started (Popen raises on the spawner thread): the attempt ends
    `task.failed` with reason "dispatch failed" and DISPATCH_FAILED, nothing is recorded of a
    worker that never ran, and the run ends failed."""
    monkeypatch.setattr(local_mod, "launch_argv", lambda limits, cgs, argv: [str(tmp_path / "no-such-launcher")])
    q = write_queue(tmp_path, git_repo, [cmd_task("a", "echo a > a.txt", max_attempts=1)])
    ledger, _, _ = ledger_env
    loop, out = run_queue(q, ops_root, ledger_env, sandbox="none")
    assert out.status == "failed"
    events = ledger.events(out.run_id)
    failed = [e.payload for e in events if e.topic == "task.failed"]
    assert len(failed) == 1 and failed[0]["reason"] == "dispatch failed"
    assert failed[0]["error"]["code"] == "DISPATCH_FAILED" and "no-such-launcher" in failed[0]["error"]["message"]
    assert not [e for e in events if e.topic in ("task.progress", "task.completed", "proposal.submitted")]


def test_the_run_loop_thread_never_forks_a_worker(git_repo, ops_root, ledger_env, tmp_path, monkeypatch) -> None:
    """Every worker's files are written and its Popen runs on a spawner thread; the run still completes."""
    from coordinator.runloop import attempts as attempts_mod

    threads: list[str] = []
    writers: list[str] = []
    real, real_write = LocalExecutor._popen, attempts_mod.write_attempt

    def recording(self, neid, proc):
        threads.append(threading.current_thread().name)
        return real(self, neid, proc)

    def recording_write(*a, **kw):
        writers.append(threading.current_thread().name)
        return real_write(*a, **kw)

    monkeypatch.setattr(LocalExecutor, "_popen", recording)
    monkeypatch.setattr(attempts_mod, "write_attempt", recording_write)
    q = write_queue(tmp_path, git_repo, [cmd_task(n, f"echo {n} > {n}.txt") for n in ("a", "b", "c")])
    _, out = run_queue(q, ops_root, ledger_env, sandbox="none")
    assert out.counts.get("succeeded") == 3, out
    assert len(threads) == 3 and all(t.startswith("dome-spawn") for t in threads), threads
    assert len(writers) == 3 and all(t.startswith("dome-spawn") for t in writers), writers
