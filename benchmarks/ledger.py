"""Ledger throughput, each figure beside a baseline measured in the same run.

    python benchmarks/ledger.py [--durable N] [--batched N] [--batch-size B] [--json]

- raw SQLite: INSERT of the same row shape (same columns, indexes, payload
  and record sizes) into the same kind of file (WAL, synchronous=FULL), one
  BEGIN IMMEDIATE/COMMIT per row, values precomputed: the floor the ledger
  is compared with.
- ledger durable: Ledger.append, one durable transaction per event (canonical
  JSON, digests, chain, the insert, the commit).
- ledger batched: Ledger.append_batch, B events per durable transaction;
  beside it raw SQLite `executemany` of the same rows, B per transaction,
  the two alternating in 10 chunks (its baseline).
- ledger signed: Ledger.append with an Ed25519 signer (informative).
- replay: coordinator.runstate.fold (the one fold of run events) over a run's EventRecords, and load+fold
  (Ledger.events then fold); and Ledger.verify over the same run.
Raw, durable and signed writes alternate in 20 small chunks and are rated
over their summed times (so all three see the same moments of a shared
disk); batched and replay figures are the best of --repeat runs. A
calibration figure (one json.dumps of a small dict) says how loaded the
machine was; per-CPU-second rates are printed beside wall-clock rates.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ledger import EventDraft, Ledger  # noqa: E402
from ledger.engine import PAGE_SIZE  # noqa: E402
from ledger.models import Base  # noqa: E402
from coordinator.runstate import fold  # noqa: E402
from registry.signing import SigningKey  # noqa: E402
from sqlalchemy import create_engine  # noqa: E402
from sqlalchemy.schema import CreateIndex, CreateTable  # noqa: E402


def payload(i: int) -> dict:
    return {"attempt": 1, "fraction": i % 100, "message": "tile 17/64 done", "tile": i,
            "metrics": {"l2": 1234 + i, "pvb": 56}, "outputs": ["sha256:" + "ab" * 32]}


def draft(i: int) -> EventDraft:
    return EventDraft("task.progress", payload(i), wave_id="w-1", node_id=f"node-{i % 50}",
                      node_execution_id=f"node-{i % 50}:1", task_id=f"node-{i % 50}")


def _fresh(tmp: Path, name: str) -> Path:
    root = tmp / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    return root


class RawWriter:
    """Plain sqlite3 inserts of the ledger's row shape into a table made from
    the same model (same columns, constraints, indexes), same page size,
    WAL + synchronous=FULL,
    one BEGIN IMMEDIATE/COMMIT per row, values precomputed."""

    def __init__(self, tmp: Path, rows: list[tuple]) -> None:
        db = _fresh(tmp, "raw") / "raw.db"
        ddl_engine = create_engine("sqlite://")
        self.con = sqlite3.connect(db, isolation_level=None)
        self.con.execute(f"PRAGMA page_size={PAGE_SIZE}")
        self.con.execute("PRAGMA journal_mode=WAL")
        self.con.execute("PRAGMA synchronous=FULL")
        table = Base.metadata.tables["events"]
        self.con.execute(str(CreateTable(table).compile(ddl_engine)))
        for ix in table.indexes:
            self.con.execute(str(CreateIndex(ix).compile(ddl_engine)))
        cols = [c.name for c in table.columns if c.name != "id"]
        self.sql = f"INSERT INTO events ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        self.rows, self.done = rows, 0

    def write(self, n: int) -> float:
        batch = [(r[0], self.done + i + 1, f"evt-{self.done + i}", *r[3:]) for i, r in
                 ((i, self.rows[(self.done + i) % len(self.rows)]) for i in range(n))]
        t = time.perf_counter()
        for row in batch:
            self.con.execute("BEGIN IMMEDIATE")
            self.con.execute(self.sql, row)
            self.con.execute("COMMIT")
        self.done += n
        return time.perf_counter() - t

    def write_batched(self, n: int, size: int) -> tuple[float, float]:
        """n rows, `size` per transaction through one `executemany` each: the baseline of the
        ledger's batched append. (wall seconds, CPU seconds of this process)."""
        batch = [(r[0], self.done + i + 1, f"evt-{self.done + i}", *r[3:]) for i, r in
                 ((i, self.rows[(self.done + i) % len(self.rows)]) for i in range(n))]
        t, c = time.perf_counter(), time.process_time()
        for k in range(0, n, size):
            self.con.execute("BEGIN IMMEDIATE")
            self.con.executemany(self.sql, batch[k:k + size])
            self.con.execute("COMMIT")
        self.done += n
        return time.perf_counter() - t, time.process_time() - c


class DurableWriter:
    """Ledger.append, one durable transaction per event."""

    def __init__(self, tmp: Path, signer: SigningKey | None = None, name: str = "durable") -> None:
        self.led = Ledger.open(None, _fresh(tmp, name))
        self.signer, self.done = signer, 0

    def write(self, n: int) -> float:
        drafts = [draft(self.done + i) for i in range(n)]
        t = time.perf_counter()
        for d in drafts:
            self.led.append("run-bench", d.topic, d.payload, wave_id=d.wave_id, node_id=d.node_id,
                            node_execution_id=d.node_execution_id, task_id=d.task_id,
                            signer=self.signer)
        self.done += n
        return time.perf_counter() - t


def bench_durable_vs_raw(tmp: Path, n: int, rows: list[tuple], rounds: int) -> tuple[float, float, float]:
    """Raw, ledger and signed-ledger writes in alternating small chunks, so all
    three see the same moments of a shared disk; rates over the summed time."""
    raw, led, signed = RawWriter(tmp, rows), DurableWriter(tmp), DurableWriter(tmp, SigningKey.generate(), "signed")
    chunk = max(1, n // rounds)
    t_raw = t_led = t_signed = 0.0
    for _ in range(rounds):
        t_raw += raw.write(chunk)
        t_led += led.write(chunk)
        t_signed += signed.write(chunk)
    total = chunk * rounds
    assert led.led.head("run-bench") == total
    led.led.close()
    signed.led.close()
    raw.con.close()
    return total / t_raw, total / t_led, total / t_signed


def sample_rows(tmp: Path) -> list[tuple]:
    root = _fresh(tmp, "sample")
    with Ledger.open(None, root) as led:
        led.append_batch("run-bench", [draft(i) for i in range(50)])
        with led.engines.read.connect() as conn:
            cols = [c.name for c in Base.metadata.tables["events"].columns if c.name != "id"]
            return [tuple(r) for r in conn.exec_driver_sql(f"SELECT {', '.join(cols)} FROM events")]


def bench_batched(tmp: Path, n: int, size: int) -> tuple[float, float]:
    """(events/s by wall clock, events/s by this process's CPU time)."""
    root = _fresh(tmp, "batched")
    drafts = [draft(i) for i in range(n)]
    with Ledger.open(None, root) as led:
        t, c = time.perf_counter(), time.process_time()
        for k in range(0, n, size):
            led.append_batch("run-bench", drafts[k:k + size])
        dt, dc = time.perf_counter() - t, time.process_time() - c
        assert led.head("run-bench") == n
    return n / dt, n / max(dc, 1e-9)


def bench_batched_vs_raw(tmp: Path, n: int, size: int, rows: list[tuple], rounds: int) -> dict[str, float]:
    """The ledger's batched append beside raw `executemany` of its own row shape, the same
    batch size, alternating in `rounds` chunks so both see the same moments of a shared disk
    and CPU. Rates by wall clock and by this process's CPU time."""
    raw = RawWriter(tmp, rows)
    root = _fresh(tmp, "batched-pair")
    drafts = [draft(i) for i in range(n)]
    chunk = max(size, (n // rounds) // size * size)
    wall = {"raw": 0.0, "ledger": 0.0}
    cpu = {"raw": 0.0, "ledger": 0.0}
    done = 0
    with Ledger.open(None, root) as led:
        while done + chunk <= n:
            w, c = raw.write_batched(chunk, size)
            wall["raw"] += w
            cpu["raw"] += c
            t, c0 = time.perf_counter(), time.process_time()
            for k in range(done, done + chunk, size):
                led.append_batch("run-bench", drafts[k:k + size])
            wall["ledger"] += time.perf_counter() - t
            cpu["ledger"] += time.process_time() - c0
            done += chunk
        assert led.head("run-bench") == done
    raw.con.close()
    return {"raw_per_s": done / wall["raw"], "raw_per_cpu_s": done / max(cpu["raw"], 1e-9),
            "ledger_per_s": done / wall["ledger"], "ledger_per_cpu_s": done / max(cpu["ledger"], 1e-9)}


def calibration_us() -> float:
    """Microseconds for one json.dumps of a small dict: how fast (or how
    shared) this machine is right now. About 3 us on the idle dev machine."""
    obj = payload(1)
    n = 20000
    t = time.perf_counter()
    for _ in range(n):
        json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return (time.perf_counter() - t) / n * 1e6


def bench_replay(tmp: Path, n: int) -> tuple[float, float, int]:
    root = _fresh(tmp, "replay")
    with Ledger.open(None, root) as led:
        d = []
        for i in range(n // 4):
            node = f"node-{i}"
            d += [EventDraft("task.dispatched", {"attempt": 1}, wave_id="w-1", node_id=node,
                             task_id=node, node_execution_id=node + ":1"),
                  EventDraft("task.progress", {"fraction": 0.5}, wave_id="w-1", node_id=node,
                             task_id=node, node_execution_id=node + ":1"),
                  EventDraft("task.completed", {"outcome": "succeeded", "outputs": ["patch:" + node]},
                             wave_id="w-1", node_id=node, task_id=node, node_execution_id=node + ":1"),
                  EventDraft("task.ack", {}, wave_id="w-1", node_id=node, task_id=node)]
        for k in range(0, len(d), 5000):
            led.append_batch("run-bench", d[k:k + 5000])
        t = time.perf_counter()
        events = led.events("run-bench")
        state = fold(events)
        load_fold = len(events) / (time.perf_counter() - t)
        t, c = time.perf_counter(), time.process_time()
        state2 = fold(events)
        fold_only = len(events) / (time.perf_counter() - t)
        fold_cpu = len(events) / max(time.process_time() - c, 1e-9)
        assert state == state2 and len(state.nodes) == n // 4
        t = time.perf_counter()
        assert led.verify().ok
        verify_rate = len(events) / (time.perf_counter() - t)
    return fold_only, load_fold, len(events), fold_cpu, verify_rate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--durable", type=int, default=2000, help="events for the durable runs")
    ap.add_argument("--batched", type=int, default=50_000, help="events for the batched run")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--replay", type=int, default=100_000, help="events to replay")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dome-bench-", dir=os.environ.get("DOME_BENCH_DIR")))
    try:
        rows = sample_rows(tmp)
        calib_before = calibration_us()
        raw, durable, signed = bench_durable_vs_raw(tmp, args.durable, rows, rounds=20)
        batches = [bench_batched(tmp, args.batched, args.batch_size) for _ in range(args.repeat)]
        batched, batched_cpu = max(b[0] for b in batches), max(b[1] for b in batches)
        pair = bench_batched_vs_raw(tmp, args.batched, args.batch_size, rows, rounds=10)
        replays = [bench_replay(tmp, args.replay) for _ in range(args.repeat)]
        fold_only = max(r[0] for r in replays)
        load_fold = max(r[1] for r in replays)
        fold_cpu = max(r[3] for r in replays)
        verify_rate = max(r[4] for r in replays)
        calib = min(calib_before, calibration_us())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {
        "raw_sqlite_inserts_per_s": round(raw), "ledger_durable_appends_per_s": round(durable),
        "durable_vs_raw": round(durable / raw, 3),
        "ledger_signed_durable_appends_per_s": round(signed),
        "ledger_batched_appends_per_s": round(batched), "batch_size": args.batch_size,
        "ledger_batched_appends_per_cpu_s": round(batched_cpu),
        "raw_sqlite_executemany_per_s": round(pair["raw_per_s"]),
        "raw_sqlite_executemany_per_cpu_s": round(pair["raw_per_cpu_s"]),
        "paired_ledger_batched_per_s": round(pair["ledger_per_s"]),
        "paired_ledger_batched_per_cpu_s": round(pair["ledger_per_cpu_s"]),
        "batched_vs_raw_executemany": round(pair["ledger_per_s"] / pair["raw_per_s"], 3),
        "replay_fold_events_per_s": round(fold_only), "replay_fold_events_per_cpu_s": round(fold_cpu),
        "replay_load_and_fold_events_per_s": round(load_fold),
        "verify_events_per_s": round(verify_rate),
        "calibration_json_dumps_us": round(calib, 2),
        "replay_events": replays[0][2], "durability": "WAL, synchronous=FULL",
        "cpus": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"raw SQLite inserts (1 row/commit, WAL, sync=FULL): {raw:>10,.0f} /s")
        print(f"ledger durable appends (1 event/commit):           {durable:>10,.0f} /s  "
              f"({durable / raw:.2f} x raw; target >= 0.5)")
        print(f"ledger signed durable appends (Ed25519):           {signed:>10,.0f} /s")
        print(f"ledger batched appends ({args.batch_size}/commit):               {batched:>10,.0f} /s  "
              f"(target >= 50,000; {batched_cpu:,.0f} per CPU-second)")
        print(f"raw SQLite executemany ({args.batch_size}/commit, same rows):    {pair['raw_per_s']:>10,.0f} /s  "
              f"({pair['raw_per_cpu_s']:,.0f} per CPU-second); ledger batched beside it "
              f"{pair['ledger_per_s']:,.0f} /s = {pair['ledger_per_s'] / pair['raw_per_s']:.2f} x raw")
        print(f"replay fold:                                        {fold_only:>10,.0f} events/s "
              f"(target >= 200,000; {fold_cpu:,.0f} per CPU-second)")
        print(f"replay load+fold (read from SQLite, parse, fold):   {load_fold:>10,.0f} events/s")
        print(f"ledger verify (digest, chain, canonical form):      {verify_rate:>10,.0f} events/s")
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (shared); "
              f"calibration json.dumps {calib:.1f} us (about 3 us when idle)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
