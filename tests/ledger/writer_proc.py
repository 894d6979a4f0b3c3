"""A separate writer process for the concurrency and crash tests.

usage: writer_proc.py OPS_ROOT RUN_ID WRITER COUNT BATCH
Opens the ledger at $DOME_TEST_DB (default: OPS_ROOT/dome.db). Appends COUNT events to RUN_ID in batches of BATCH (1 = one durable append
each), payload {"writer": WRITER, "i": i}; prints the number committed after
each commit so a parent can kill it mid-stream.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ledger import EventDraft, Ledger


def main() -> None:
    ops_root, run_id, writer, count, batch = sys.argv[1:6]
    count_i, batch_i = int(count), int(batch)
    ledger = Ledger.open(os.environ.get("DOME_TEST_DB"), Path(ops_root))
    done = 0
    print("ready", flush=True)
    while done < count_i:
        n = min(batch_i, count_i - done)
        ledger.append_batch(run_id, [EventDraft("task.progress", {"writer": writer, "i": done + k})
                                     for k in range(n)])
        done += n
        print(done, flush=True)
    ledger.close()


if __name__ == "__main__":
    main()
