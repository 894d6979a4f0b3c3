"""`dome report RUN_ID [--html FILE]`: a human report of a run.

Without --html it prints a short text summary. With --html it writes one
self-contained page: summary and verdict, wave timeline, evidence chain, and
for litho runs per-clip pictures beside the published numbers. Exit codes:
0 written, 2 unknown run, 3 internal failure.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from registry.errors import DomeError

from .main import EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, add_common_arguments, open_ledger, refuse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN_ID")
    parser.add_argument("--html", metavar="FILE", help="write a self-contained HTML report to FILE")
    parser.add_argument("--no-pictures", action="store_true",
                        help="skip litho pictures (they need the litho engine installed)")
    add_common_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from coordinator.report.build import build_report

    ops_root = Path(args.ops_root)
    try:
        ledger = open_ledger(args)
    except DomeError as exc:
        return refuse("report", args, exc)
    from .main import report_error, run_not_found

    progress = ReportProgress(sys.stderr)
    try:
        if args.run_id not in ledger.run_ids():
            report_error("report", run_not_found(args.run_id), as_json=args.json)
            return EXIT_USAGE
        report = build_report(ledger, ops_root, args.run_id, pictures=not args.no_pictures, progress=progress)
    except DomeError as exc:
        report_error("report", exc, as_json=args.json)
        return EXIT_INTERNAL
    finally:
        ledger.close()
        progress.done()
    if args.html:
        Path(args.html).write_text(report.html)
    if args.json:
        ex = report.model.explanation
        print(json.dumps({"run_id": args.run_id, "status": report.model.status, "html": args.html,
                          "partial": bool(ex and ex.partial), "tasks_not_landed": ex.tasks_not_landed if ex else [],
                          "clips": [c.name for c in report.clips], "model_usage": report.model.model_usage}))
    else:
        m = report.model
        print(f"run {m.run_id}: {m.status}; {m.waves} waves, {len(m.attempts)} attempts, "
              f"{len(m.proposals)} proposals, {len(m.validations)} validations")
        if m.explanation is not None and m.explanation.partial:
            print("partial: without " + ", ".join(f"{t.get('node_id')} ({t.get('status')})"
                                                          for t in m.explanation.tasks_not_landed))
        run = (m.model_usage or {}).get("run") or {}
        if run.get("calls"):
            print(f"model calls: {run['calls']}, tokens in {run['tokens_in']}, out {run['tokens_out']}, "
                  f"cost ${run['cost_micros'] / 1e6:.6f}")
        if args.html:
            print(f"report written to {args.html}")
    return EXIT_OK


class ReportProgress:
    """Progress on stderr while the report renders (pictures take a while):
    one line per step, redrawn in place on a terminal."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.tty = bool(getattr(out, "isatty", lambda: False)())
        self.shown = False

    def __call__(self, done: int, total: int, what: str) -> None:
        import shutil
        text = f"dome report: {what} ({done}/{total})" if total else f"dome report: {what}"
        if self.tty:
            width = shutil.get_terminal_size((80, 24)).columns
            self.out.write("\r\x1b[K" + text[: max(10, width - 1)])
        else:
            self.out.write(text + "\n")
        self.out.flush()
        self.shown = True

    def done(self) -> None:
        if self.tty and self.shown:
            self.out.write("\r\x1b[K")
            self.out.flush()
