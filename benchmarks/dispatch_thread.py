"""What starting a worker costs the run loop's thread: the local executor's
`dispatch`, with the start on a spawner thread (what runs use) beside the
start on the caller's thread (`spawn_threads=0`, as before), alternating in
the same process so that both see the same machine load.

    python benchmarks/dispatch_thread.py [--attempts 40] [--rounds 3] [--sandbox none,bwrap]

Each attempt is the real command line of its sandbox (`python -m worker_sdk`
under bubblewrap and the launcher, or unconfined) on a SpawnSpec it refuses
at once, so the workers end quickly; writing its files (the SpawnSpec, task
facts) is part of the start, as in a run; only the dispatching thread's CPU time
(time.thread_time) is counted, and the spawner thread's CPU is shown beside
it. Between batches every worker is reaped.
"""
from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from coordinator.executors.base import AttemptFiles  # noqa: E402
from coordinator.executors.local import LocalExecutor  # noqa: E402


def _files(work: Path, neid: str, *, in_memory: bool = False) -> AttemptFiles:
    """What the run loop hands over: writing the attempt's files is part of the start (on disk here,
    whatever `in_memory` asks: the measure is the thread the work runs on)."""
    adir = work / "attempts" / neid
    (adir / "scratch").mkdir(parents=True)
    (adir / "spawn.json").write_text("{}")
    (adir / "task.json").write_text("{}")
    return AttemptFiles(spawn_json=adir / "spawn.json", scratch=adir / "scratch", base_git=work / "base.git",
                        gateway_socket=work / "gw.sock", coordinator_pub=work / "coordinator.pub",
                        log_dir=adir / "logs")


def batch(ex: LocalExecutor, work: Path, attempts: int, tag: str) -> tuple[float, float]:
    """(caller thread CPU ms per dispatch, spawner thread CPU ms per start) for one batch."""
    files = [f"ne-{tag}-{i:04d}" for i in range(attempts)]
    spawner0 = ex.spawner.cpu_s
    c0 = time.thread_time()
    for neid in files:
        ex.dispatch({"node_execution_id": neid}, functools.partial(_files, work, neid))
    caller = time.thread_time() - c0
    left = set(files)
    deadline = time.monotonic() + 300
    while left and time.monotonic() < deadline:
        for e in ex.poll():
            left.discard(e.node_execution_id)
        time.sleep(0.01)
    return 1000 * caller / attempts, 1000 * (ex.spawner.cpu_s - spawner0) / attempts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--attempts", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sandbox", default="none,bwrap")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    out = []
    for sandbox in a.sandbox.split(","):
        work = Path(tempfile.mkdtemp(prefix="dome-bench-dispatch-"))
        for name in ("base.git", "coordinator.pub", "gw.sock"):
            (work / name).touch() if name != "base.git" else (work / name).mkdir()
        executors = {t: LocalExecutor(sandbox=sandbox, max_concurrency=4, spawn_threads=t) for t in (0, 1)}
        res: dict[int, list[tuple[float, float]]] = {0: [], 1: []}
        try:
            for r in range(a.rounds):
                for t, ex in executors.items():
                    res[t].append(batch(ex, work, a.attempts, f"{r}-{t}"))
        finally:
            for ex in executors.values():
                ex.shutdown()
        row = {"sandbox": sandbox, "attempts": a.attempts * a.rounds,
               "loop_thread_ms_per_start_inline": round(statistics.median(c for c, _ in res[0]), 3),
               "loop_thread_ms_per_start_spawner": round(statistics.median(c for c, _ in res[1]), 3),
               "spawner_thread_ms_per_start": round(statistics.median(s for _, s in res[1]), 3)}
        out.append(row)
        if not a.json:
            print(f"sandbox {sandbox}: run loop thread per worker start {row['loop_thread_ms_per_start_spawner']} ms "
                  f"with the spawner thread (which spends {row['spawner_thread_ms_per_start']} ms), beside "
                  f"{row['loop_thread_ms_per_start_inline']} ms starting it on the loop's thread "
                  f"(median of {a.rounds} batches of {a.attempts})", flush=True)
    if a.json:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
