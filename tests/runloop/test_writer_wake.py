"""The run loop sleeps through a worker's calls before its result: records of quiet
topics do not wake a waiter on the writer; any other record does."""
from __future__ import annotations

import threading
import time
from pathlib import Path

from coordinator.runloop.loop import QUIET_TOPICS
from coordinator.runloop.writer import LedgerWriter
from coordinator.runstate import RunState
from ledger import Ledger
from registry.signing import SigningKey


def _woken_after(writer: LedgerWriter, append, timeout: float = 2.0) -> float:
    """Seconds a waiter slept when `append` ran just after it started waiting."""
    ready = threading.Event()
    slept: list[float] = []

    def waiter() -> None:
        with writer.lock:
            ready.set()
            t0 = time.monotonic()
            writer.wait(timeout)
            slept.append(time.monotonic() - t0)

    th = threading.Thread(target=waiter)
    th.start()
    ready.wait()
    with writer.lock:  # the waiter is inside wait() once it has released the lock
        pass
    append()
    th.join()
    return slept[0]


def test_quiet_records_do_not_wake_the_loop_and_results_do(tmp_path: Path) -> None:
    assert {"grant.call", "artifact.put", "patch.submitted", "task.progress"} <= QUIET_TOPICS
    assert not QUIET_TOPICS & {"task.completed", "task.failed", "grant.revoked", "run.finished"}
    with Ledger.open(None, tmp_path / "ops") as led:
        w = LedgerWriter(led, "run-1", SigningKey.generate(), RunState(), quiet=QUIET_TOPICS)
        assert _woken_after(w, lambda: w.append("grant.call", {}), timeout=0.6) >= 0.5
        assert _woken_after(w, lambda: w.append_many([("artifact.put", {}, {}), ("grant.call", {}, {})]),
                            timeout=0.6) >= 0.5
        assert _woken_after(w, lambda: w.append("test.result", {}), timeout=5) < 2
        assert _woken_after(w, lambda: w.append_many([("grant.call", {}, {}), ("test.result", {}, {})]),
                            timeout=5) < 2
        assert w.appends == 6  # every record is applied to the run state, quiet or not
