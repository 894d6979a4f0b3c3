"""Real processes: concurrent writers and kill -9 in the middle of appends."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from ledger import Ledger
from tests.conftest import REPO_ROOT, dome_cli

WRITER = Path(__file__).with_name("writer_proc.py")


def _spawn(ops_root: Path, run_id: str, writer: str, count: int, batch: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen([sys.executable, str(WRITER), str(ops_root), run_id, writer,
                             str(count), str(batch)], stdout=subprocess.PIPE, text=True, env=env)


def test_two_processes_appending_at_once_keep_one_ordered_chain(ops_root: Path) -> None:
    Ledger.open(None, ops_root).close()
    procs = [_spawn(ops_root, "shared-run", w, 150, 1) for w in ("A", "B")]
    procs += [_spawn(ops_root, "shared-run", "C", 150, 10)]
    for p in procs:
        p.communicate(timeout=240)
        assert p.returncode == 0
    with Ledger.open(None, ops_root) as led:
        evs = led.events("shared-run")
        assert [e.sequence for e in evs] == list(range(1, 451))
        for w in ("A", "B", "C"):
            mine = [e.payload["i"] for e in evs if e.payload["writer"] == w]
            assert mine == list(range(150)), w  # each writer's events in its own order
        assert all(b.prev_digest == a.record_digest for a, b in zip(evs, evs[1:]))
    assert dome_cli("ledger", "verify", "--ops-root", str(ops_root)).returncode == 0


def _kill_after(proc: subprocess.Popen, committed: int) -> int:
    assert proc.stdout is not None
    last = 0
    for line in proc.stdout:
        if line.strip().isdigit():
            last = int(line)
            if last >= committed:
                break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return last


def test_kill_9_mid_appends_leaves_a_verifying_prefix(ops_root: Path) -> None:
    with Ledger.open(None, ops_root) as led:
        led.append("crash-run", "run.started", {"writer": "-", "i": -1})
    one_by_one = _spawn(ops_root, "crash-run", "single", 100_000, 1)
    seen = _kill_after(one_by_one, 40)
    batched = _spawn(ops_root, "crash-run", "batched", 1_000_000, 97)
    _kill_after(batched, 97 * 5)
    with Ledger.open(None, ops_root) as led:
        evs = led.events("crash-run")
        assert [e.sequence for e in evs] == list(range(1, len(evs) + 1))
        single = [e.payload["i"] for e in evs if e.payload["writer"] == "single"]
        batch = [e.payload["i"] for e in evs if e.payload["writer"] == "batched"]
        assert single == list(range(len(single))) and len(single) >= seen
        assert batch == list(range(len(batch))) and len(batch) % 97 == 0  # whole batches only
        assert led.verify().ok
        led.append("crash-run", "run.finished", {"writer": "-", "i": -2})  # writable after the crash
    result = dome_cli("ledger", "verify", "--ops-root", str(ops_root), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
