"""`dome status [RUN_ID]`: runs and their state, read from the ledger (works during a run)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from registry.errors import DomeError

from .main import add_common_arguments, open_ledger, refuse

if TYPE_CHECKING:
    from ledger import Ledger


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", nargs="?", help="one run (default: every run, newest last)")
    add_common_arguments(parser)


def summarize(ledger: Ledger, run_id: str) -> dict[str, Any]:
    from coordinator.runstate import fold
    from coordinator.scheduler import statuses
    from coordinator.workqueue import parse_work_queue

    events = ledger.events(run_id)
    st = fold(events)
    started = st.started or {}
    out: dict[str, Any] = {"run_id": run_id, "status": (st.finished or {}).get("status", "running"),
                           "base_ref": started.get("base_ref"), "seed": started.get("determinism_seed"),
                           "events": len(events), "waves": st.waves, "attempts": st.total_attempts,
                           "active_attempts": st.active_executions(), "proposals": len(st.proposals)}
    qpath = Path(getattr(ledger, "ops_root", Path("ops"))) / "runs" / run_id / "work.queue.json"
    if not qpath.is_file():
        qpath = Path(started.get("work_queue_path", ""))
    try:
        raw = json.loads(qpath.read_text())
        wq = parse_work_queue(raw)
        if wq.digest == started.get("work_queue_digest"):
            s = statuses(wq.graph, st)
            out["nodes"] = {k: sum(1 for v in s.values() if v == k) for k in sorted(set(s.values()))}
    except Exception:  # noqa: BLE001 - the ledger summary stands without the queue file
        pass
    if not st.finished:
        out.update(liveness(ledger, run_id))
    if st.finished:
        out.update({k: st.finished.get(k) for k in ("head", "promoted_ref", "counts", "reason")})
        if st.finished.get("partial"):  # the rest was integrated without the tasks that failed
            out.update({"partial": True, "tasks_not_landed": list(st.finished.get("tasks_not_landed") or [])})
        if st.finished.get("awaiting_consent"):  # held at the human gate
            out.update({k: st.finished.get(k) for k in ("awaiting_consent", "consent_token_file", "missing")})
    return out


def liveness(ledger: Ledger, run_id: str) -> dict[str, Any]:
    """An unfinished run is `running` while a coordinator holds its lease, else
    `stalled` (its coordinator died or hung): someone must resume it."""
    import socket
    import time

    from ledger.lease import is_live

    lease = ledger.lease(run_id) if hasattr(ledger, "lease") else None
    live = is_live(lease, time.time(), socket.gethostname())
    out: dict[str, Any] = {"status": "running" if live else "stalled",
                           "lease": None if lease is None else {**lease.to_dict(), "live": live}}
    if not live:
        out["next_step"] = f"dome run --resume {run_id}"
    return out


def run_reasons(ledger: Ledger, run_id: str, out: Any = None) -> dict[str, Any]:
    """Why the run stands where it does: the reasons and the verdict block that
    `dome run` ends with, worded for the width of the terminal `out` writes to."""
    from coordinator.integration.recorder import readable_payload
    from coordinator.report.explain import explain, reasons
    from coordinator.runloop.view import columns

    events = [{**e.to_json(), "payload": readable_payload(e.topic, e.payload, ledger.blobs)}
              for e in ledger.events(run_id)]
    return reasons(explain(run_id, events), columns(out or sys.stdout))


def run(args: argparse.Namespace) -> int:
    from .main import report_error, run_not_found

    try:
        ledger = open_ledger(args)
    except DomeError as exc:
        return refuse("status", args, exc)
    try:
        ids = [args.run_id] if args.run_id else ledger.run_ids()
        if args.run_id and not ledger.events(args.run_id, limit=1):
            report_error("status", run_not_found(args.run_id), as_json=args.json)
            return 2
        rows = [summarize(ledger, r) for r in ids]
        if args.run_id:
            rows[0]["why"] = run_reasons(ledger, args.run_id)
    finally:
        ledger.close()
    if args.json:
        print(json.dumps(rows[0] if args.run_id else {"runs": rows}, sort_keys=True))
        return 0
    for r in rows:
        nodes = " ".join(f"{k}={v}" for k, v in (r.get("nodes") or {}).items())
        shown = f"{r['status']} (partial)" if r.get("partial") else r["status"]
        print(f"{r['run_id']}  {shown:<10} waves={r['waves']} attempts={r['attempts']} "
              f"active={len(r['active_attempts'])} proposals={r['proposals']} {nodes}")
        if r.get("next_step"):
            print(f"  no coordinator holds this run (it was killed or hung): resume with {r['next_step']}")
    if args.run_id:
        for line in rows[0]["why"]["verdict"][1:]:
            print(line)
    return 0
