"""Scratch disk follows the attempts in flight, not the attempts run: each checkout
shares the base's git objects, is deleted as its attempt ends, and nothing of the
run's scratch is left when the run ends."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from benchmarks.scale_curve import tree_bytes  # the benchmark's own measure of scratch disk
from tests.conftest import git
from tests.runloop.conftest import cmd_task, write_queue

FILES = 200


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_scratch_follows_attempts_in_flight_and_nothing_is_left(git_repo: Path, ops_root: Path, ledger_env,
                                                                tmp_path: Path, sandbox: str) -> None:
    from coordinator.runloop.loop import RunContext, RunLoop

    for i in range(FILES):  # a 200-file repository, ~1.6 MB of objects
        (git_repo / f"f{i:03d}.txt").write_bytes(os.urandom(4096).hex().encode())
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-q", "-m", "200 files")
    n, slots = 12, 2
    tasks = [cmd_task(f"t{i:02d}", f"sleep 0.3; echo {i} > out{i:02d}.txt") for i in range(n)]
    q = write_queue(tmp_path, git_repo, tasks, scheduling={"max_parallel": slots, "endgame_max_duplicates": 0})
    ledger, signer, keyring = ledger_env
    loop = RunLoop.start(q, RunContext(ledger=ledger, ops_root=ops_root, signer=signer, keyring=keyring,
                                       sandbox=sandbox))
    attempts = loop.work / "attempts"
    peak = {"dirs": 0, "bytes": 0, "seen": set(), "own_objects": 0, "alternates": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            try:  # an attempt's folder (an unsandboxed checkout's) and its log beside it
                entries = list(attempts.iterdir())
            except OSError:
                entries = []
            dirs = [d for d in entries if d.is_dir()]
            live = {p.name.removesuffix(".log") for p in entries}
            peak["dirs"] = max(peak["dirs"], len(live))
            peak["seen"].update(live)
            peak["bytes"] = max(peak["bytes"], tree_bytes(attempts) if entries else 0)
            for d in dirs:
                objects = d / "scratch" / "repo" / ".git" / "objects"
                if (objects / "info" / "alternates").is_file():
                    peak["alternates"] += 1
                    peak["own_objects"] = max(peak["own_objects"], tree_bytes(objects / "pack"))
            time.sleep(0.02)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        out = loop.run()
    finally:
        stop.set()
        th.join(10)
    assert out.status in ("completed", "promoted"), out
    assert out.counts["succeeded"] == n
    base_bytes = tree_bytes(git_repo / ".git" / "objects")
    # an attempt's files go when its worker exits; the scheduler may fill the slot of an attempt
    # that has reported its result a moment before its process is gone: at most 2 x slots at once,
    # however many tasks the run has
    assert 0 < peak["dirs"] <= 2 * slots < n, peak
    assert len(peak["seen"]) >= slots
    if sandbox == "none":
        # checkouts on the host borrow the base's objects: none copies them
        assert peak["alternates"] > 0 and peak["own_objects"] < base_bytes // 10, (peak, base_bytes)
        # disk in proportion to the attempts in flight: at most that many checkouts (tree + index)
        per_checkout = sum(p.stat().st_size for p in git_repo.glob("f*.txt")) + 200_000
        assert peak["bytes"] <= 2 * slots * per_checkout, (peak["bytes"], per_checkout)
    else:
        # in bubblewrap the checkout is in the sandbox's own capped tmpfs, gone with it: the
        # host keeps only each attempt's log (its spawn spec, task facts and key are in memory)
        assert peak["alternates"] == 0 and peak["bytes"] <= 2 * slots * 64_000, peak
    # nothing of the run's scratch is left
    assert not loop.work.exists()
    assert not list(ops_root.rglob("scratch"))
