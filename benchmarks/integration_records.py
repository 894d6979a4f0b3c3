"""The integration stage's per-proposal ledger writes: one commit each, beside one commit per step.

Each proposal the finish stage integrates leaves three signed records
(integration.proposal_verified, integration.checkpoint,
integration.apply_result). The Emitter holds these per-proposal records and
writes them in one ledger transaction at the end of the step (or before any
other record); before, each record was its own durable transaction. Both
contenders run in this process, on the same SQLite ledger settings
(WAL, synchronous=FULL), with the same signed artifacts:

- each:  `emit.flush()` after every record (one commit per record, as before);
- held:  records flushed as the Emitter does by itself (one commit per step,
         at most FLUSH_AT records each).

Reported: CPU (user + system of this process) and wall time per proposal.
    python benchmarks/integration_records.py [--proposals 1000] [--rounds 3] [--json]
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coordinator.integration.evidence import T_APPLY, T_CHECKPOINT, T_PROPOSAL  # noqa: E402
from coordinator.integration.recorder import Emitter  # noqa: E402
from coordinator.keys import load_or_create_signing_key  # noqa: E402
from ledger import Ledger  # noqa: E402


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _records(emit: Emitter, k: int, each: bool) -> None:
    pid = f"pp-{k:024x}"
    for topic, art in ((T_PROPOSAL, {"artifact_kind": "dome.proposal_verification/v1", "proposal_id": pid,
                                     "diff_digest": f"sha256:{k:064x}", "risk": "low",
                                     "touched_files": [f"out/i{k:05d}.txt"]}),
                       (T_CHECKPOINT, {"artifact_kind": "dome.checkpoint/v1", "checkpoint_id": f"cp-{k + 1:04d}",
                                       "commit": f"{k:040x}", "tree": f"{k + 1:040x}", "proposal_ids": [pid]}),
                       (T_APPLY, {"artifact_kind": "dome.apply_result/v1", "proposal_id": pid, "applied": True,
                                  "checkpoint_id": f"cp-{k + 1:04d}", "head_ref": f"{k:040x}"})):
        emit(topic, art)
        if each:
            emit.flush()


def one(n: int, each: bool) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="dome-intrec-") as tmp:
        ops = Path(tmp) / "ops"
        with Ledger.open(None, ops) as ledger:
            key = load_or_create_signing_key(ops)
            ledger.append("run-b", "run.started", {"x": 1})  # the schema and connections are warm
            emit = Emitter(ledger, "run-b", key, lambda: "2026-11-26T00:00:00Z")
            c0, w0 = _cpu(), time.perf_counter()
            for k in range(n):
                _records(emit, k, each)
            emit.flush()
            cpu, wall = _cpu() - c0, time.perf_counter() - w0
            assert len(ledger.events("run-b")) == 1 + 3 * n
    return 1000 * cpu / n, 1000 * wall / n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--proposals", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    rows: dict[str, list[tuple[float, float]]] = {"each": [], "held": []}
    for _ in range(a.rounds):  # alternate, so load changes hit both alike
        rows["each"].append(one(a.proposals, True))
        rows["held"].append(one(a.proposals, False))
    out = {k: {"cpu_ms_per_proposal": round(min(c for c, _ in v), 3),
               "wall_ms_per_proposal": round(min(w for _, w in v), 3)} for k, v in rows.items()}
    out["cpu_ratio"] = round(out["each"]["cpu_ms_per_proposal"] / out["held"]["cpu_ms_per_proposal"], 2)
    out["proposals"] = a.proposals
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{a.proposals} proposals, 3 records each, SQLite (best of {a.rounds})")
        for k in ("each", "held"):
            print(f"  {k:5s} CPU {out[k]['cpu_ms_per_proposal']:7.3f} ms/proposal   "
                  f"wall {out[k]['wall_ms_per_proposal']:7.3f} ms/proposal")
        print(f"  CPU ratio each/held: {out['cpu_ratio']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
