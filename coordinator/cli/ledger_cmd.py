"""`dome ledger verify` and `dome ledger export`.

`verify` checks every digest, chain link and signature, and cross-checks
the exported copies under OPS_ROOT/runs/ (records cut off the end of a run
show up there as LEDGER_TRUNCATED; stale copies are warnings). Signatures are checked against the keyring of OPS_ROOT/keys/*.pub
(coordinator.keys.load_keyring); a signed record whose key is not there fails
closed. Exit codes: 0 the ledger is valid, 1 a record is bad (the first one
is named), 2 bad arguments, 3 the ledger or the keyring could not be opened.

`export [RUN_ID ...]` rewrites the projections from the ledger (the ledger
wins): OPS_ROOT/runs/<run_id>/events/event.<sequence>.json and
OPS_ROOT/runs/<run_id>/otel/otlp.json, for the named runs or every run.
Exit codes: 0 done, 2 unknown run, 3 the ledger could not be opened.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from registry.errors import DomeError

from .main import EXIT_INVALID, EXIT_OK, EXIT_USAGE, add_common_arguments, ledger_exit_code, open_ledger, refuse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    verify = sub.add_parser("verify", help="check every digest, chain link and signature")
    add_common_arguments(verify)
    export = sub.add_parser("export", help="rewrite ops/runs/<run_id>/events and otel from the ledger")
    export.add_argument("run_ids", nargs="*", metavar="RUN_ID", help="runs to export (default: all)")
    add_common_arguments(export)


def _export(args: argparse.Namespace) -> int:
    from ledger.export import export_run
    from ledger.otel import write_projection

    ops_root = Path(args.ops_root)
    try:
        ledger = open_ledger(args)
    except DomeError as exc:
        return refuse("ledger export", args, exc)
    with ledger:
        known = ledger.run_ids()
        wanted = args.run_ids or known
        unknown = [r for r in wanted if r not in known]
        if unknown:
            from .main import report_error, run_not_found
            report_error("ledger export", run_not_found(unknown[0]), as_json=args.json)
            return EXIT_USAGE
        out = []
        for run_id in wanted:
            written = export_run(ledger, run_id, ops_root)
            otel = write_projection(ledger, run_id, ops_root)
            out.append({"run_id": run_id, "events": ledger.head(run_id), "rewritten": len(written),
                        "otel": str(otel)})
    if args.json:
        print(json.dumps({"ok": True, "runs": out}))
    else:
        for r in out:
            print(f"{r['run_id']}: {r['events']} events ({r['rewritten']} files rewritten), otel {r['otel']}")
    return EXIT_OK


def _blob_problems(ledger) -> list:
    """Every blob a record names, read back and re-hashed: one problem per missing or changed blob."""
    from coordinator.integration.blob_refs import check_blobs, events_blobs
    from ledger.paging import iter_events
    from ledger.verify import Problem
    out = []
    for run_id in ledger.run_ids():
        try:
            refs = events_blobs(iter_events(ledger, run_id))
        except Exception:  # noqa: BLE001 - a record that does not read is already a problem of the chain check
            continue
        for p in check_blobs(refs, ledger.blobs.get):
            out.append(Problem("BLOB_MISSING" if p.status == "missing" else "BLOB_CHANGED", p.describe(), run_id,
                               p.ref.sequence, None, None, {"digest": p.ref.digest, "named_by": p.ref.named_by}))
    return out


def _human(report) -> str:
    lines = [f"ledger: {report.runs} runs, {report.events} events, {report.signed} signed"]
    if report.ok:
        lines.append("ok: every digest, chain link and signature verifies")
        return "\n".join(lines)
    first = report.first_bad
    lines.append(f"INVALID: {len(report.problems)} bad record(s); first: run {first.run_id} "
                 f"sequence {first.sequence} event {first.event_id}: {first.code}: {first.message}")
    for p in report.problems[1:10]:
        lines.append(f"  also: run {p.run_id} sequence {p.sequence}: {p.code}: {p.message}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.action == "export":
        return _export(args)
    if args.action != "verify":
        from .main import error_object, report_error
        report_error("ledger", error_object("USAGE", "give an action: verify or export",
                                            hints=["dome ledger verify|export [RUN_ID ...] [--ops-root DIR]"]),
                     as_json=getattr(args, "json", False))
        return EXIT_USAGE
    ops_root = Path(args.ops_root)
    try:
        with open_ledger(args) as ledger:
            from coordinator.keys import load_keyring
            from ledger.export import check_against_exports
            from ledger import RecordUnreadable
            report = ledger.verify(load_keyring(ops_root))
            try:
                problems, warnings = check_against_exports(ledger, ops_root)
            except RecordUnreadable:  # the record is already named in the report; nothing to compare
                problems, warnings = [], ["the exported copies were not compared: a record cannot be read"]
            report.problems.extend(problems)
            report.problems.extend(_blob_problems(ledger))
    except DomeError as exc:
        if args.json:
            print(json.dumps({"ok": False, "error": exc.to_object()}))
        else:
            print(f"dome ledger verify: {exc}", file=sys.stderr)
        return ledger_exit_code(exc)
    except Exception as exc:  # noqa: BLE001 - a damaged database is a finding
        err = {"code": "LEDGER_UNREADABLE", "message": str(exc), "details": {}, "hints": [],
               "retry": "none"}
        print(json.dumps({"ok": False, "error": err}) if args.json
              else f"dome ledger verify: INVALID: ledger unreadable: {exc}")
        return EXIT_INVALID
    if args.json:
        print(json.dumps({**report.to_json(), "warnings": warnings}))
    else:
        print(_human(report))
        for w in warnings[:10]:
            print(f"  warning: {w}")
    return EXIT_OK if report.ok else EXIT_INVALID
