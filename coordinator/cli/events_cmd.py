"""`dome events RUN_ID [--json] [--follow] [--since N]`: a run's ledger events.

--json prints one JSON object per line (the record's export form).
--follow keeps polling for new events until the run's `run.finished` event
(or Ctrl-C). Exit codes: 0 ok, 2 unknown run or bad arguments, 3 the ledger
could not be opened.
"""
from __future__ import annotations

import argparse
import json
import time

from registry.errors import DomeError

from .main import EXIT_OK, EXIT_USAGE, add_common_arguments, open_ledger, refuse

POLL_SECONDS = 0.25
FINAL_TOPIC = "run.finished"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN_ID")
    parser.add_argument("--follow", "-f", action="store_true",
                        help="keep printing new events until run.finished (or Ctrl-C)")
    parser.add_argument("--since", type=int, default=0, metavar="N",
                        help="only events with sequence > N")
    add_common_arguments(parser)


def _short(payload: dict, width: int = 100) -> str:
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    return text if len(text) <= width else text[: width - 3] + "..."


def _line(rec) -> str:
    where = " ".join(f"{k}={v}" for k, v in (("wave", rec.wave_id), ("node", rec.node_id),
                                             ("task", rec.task_id)) if v)
    signed = " [signed]" if rec.signature else ""
    return f"{rec.sequence:>6}  {rec.ts}  {rec.topic:<22} {where}{signed}  {_short(rec.payload)}"


def run(args: argparse.Namespace) -> int:
    try:
        ledger = open_ledger(args)
    except DomeError as exc:
        return refuse("events", args, exc)
    from .main import report_error, run_not_found

    try:
        if ledger.head(args.run_id) == 0:
            report_error("events", run_not_found(args.run_id), as_json=args.json)
            return EXIT_USAGE
        since = args.since
        while True:
            batch = ledger.events(args.run_id, since=since)
            for rec in batch:
                print(json.dumps(rec.to_json(), ensure_ascii=False) if args.json else _line(rec),
                      flush=True)
                since = rec.sequence
                if args.follow and rec.topic == FINAL_TOPIC:
                    return EXIT_OK
            if not args.follow:
                break
            time.sleep(POLL_SECONDS)
        return EXIT_OK
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        ledger.close()
