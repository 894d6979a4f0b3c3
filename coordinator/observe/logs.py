"""Structured logs: with `--log-format json` (or DOME_LOG_FORMAT=json) stderr carries one
JSON object per line. A ledger event's line carries the run, wave, attempt and task ids,
its sequence and event id; an MCP call's line its request id and tool: the keys that join
logs to traces (same ids) and to the ledger."""
from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, TextIO

_lock = threading.Lock()


def line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def emit(obj: dict[str, Any], out: TextIO | None = None) -> None:
    out = out if out is not None else sys.stderr
    text = line({"ts": round(time.time(), 6), **obj})
    with _lock:
        out.write(text + "\n")
        out.flush()


def event_record(ev: Any) -> dict[str, Any]:
    """One ledger event as a log object (the same keys as the span attributes)."""
    from ledger.otel import trace_id
    obj: dict[str, Any] = {"level": "warning" if ev.topic in ("task.failed", "task.timeout", "task.lost",
                                                               "patch.rejected") else "info",
                           "msg": ev.topic, "run_id": ev.run_id, "sequence": ev.sequence,
                           "event_id": ev.event_id, "event_ts": ev.ts, "trace_id": trace_id(ev.run_id)}
    for key in ("wave_id", "node_id", "node_execution_id", "task_id"):
        value = getattr(ev, key)
        if value is not None:
            obj[key] = value
    if ev.node_execution_id:
        obj["attempt_id"] = ev.node_execution_id
    return obj


class EventLog:
    """A Follower's `log` sink: one JSON line per ledger event."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out

    def __call__(self, ev: Any) -> None:
        emit(event_record(ev), self.out)
