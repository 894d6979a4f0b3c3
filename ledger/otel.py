"""OpenTelemetry projection of ControlEvents (OTLP/JSON-shaped spans and logs).

A projection, never control truth: if it disagrees with the ledger, the
ledger wins. Ids are stable functions of the ledger's correlation keys, so
re-projecting the same run gives the same trace:

- trace id   = first 16 bytes of sha256("dome.trace:" + run_id)
- run span   = run.started .. run.finished (or the last event)
- wave span  = wave.started .. wave.finished/rebased (or the wave's last event)
- attempt span (one per node_execution_id) = task.dispatched .. its terminal event
- one log record per event, linked to its attempt/wave/run span, carrying
  dome.sequence, dome.event_id, dome.record_digest and every correlation key.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

from .export import run_dir_name
from .record import EventRecord

SCOPE = {"name": "dome.ledger", "version": "1"}
# the run loop's terminal attempt topics (coordinator.runstate.TERMINAL_ATTEMPT_TOPICS): they close a span
ATTEMPT_END = ("task.completed", "task.failed", "task.timeout", "task.cancelled", "task.lost")
STATUS_OK, STATUS_ERROR = 1, 2


def _hex(kind: str, value: str, nbytes: int) -> str:
    return hashlib.sha256(f"dome.{kind}:{value}".encode("utf-8")).hexdigest()[: nbytes * 2]


def trace_id(run_id: str) -> str:
    return _hex("trace", run_id, 16)


def span_id(kind: str, run_id: str, key: str = "") -> str:
    return _hex(f"span.{kind}", f"{run_id}\x00{key}", 8)


def _nanos(ts: str) -> str:
    dt = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    return str(int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000)


def _attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        v: dict[str, Any] = {"boolValue": value}
    elif isinstance(value, int):
        v = {"intValue": str(value)}
    else:
        v = {"stringValue": str(value)}
    return {"key": key, "value": v}


def _correlation(ev: EventRecord) -> list[dict[str, Any]]:
    attrs = [_attr("dome.run_id", ev.run_id)]
    for key in ("wave_id", "node_id", "node_execution_id", "task_id"):
        value = getattr(ev, key)
        if value is not None:
            attrs.append(_attr(f"dome.{key}", value))
    return attrs


def project(events: Iterable[EventRecord]) -> dict[str, Any]:
    """{"resourceSpans": [...], "resourceLogs": [...]} for one run's events."""
    evs = list(events)
    if not evs:
        return {"resourceSpans": [], "resourceLogs": []}
    run_id = evs[0].run_id
    tid = trace_id(run_id)
    root = span_id("run", run_id)
    spans: dict[str, dict[str, Any]] = {}
    order: list[str] = []

    def open_span(sid: str, name: str, parent: str | None, ev: EventRecord) -> dict[str, Any]:
        span = {"traceId": tid, "spanId": sid, "name": name, "kind": 1,
                "startTimeUnixNano": _nanos(ev.ts), "endTimeUnixNano": _nanos(ev.ts),
                "attributes": _correlation(ev) + [_attr("dome.start_sequence", ev.sequence),
                                                  _attr("dome.start_event_id", ev.event_id)],
                "status": {"code": 0}}
        if parent:
            span["parentSpanId"] = parent
        spans[sid] = span
        order.append(sid)
        return span

    run_span = open_span(root, f"run {run_id}", None, evs[0])
    logs = []
    for ev in evs:
        ts = _nanos(ev.ts)
        parent = root
        if ev.wave_id:
            wid = span_id("wave", run_id, ev.wave_id)
            if wid not in spans:
                open_span(wid, f"wave {ev.wave_id}", root, ev)
            if not spans[wid].get("_closed"):
                spans[wid]["endTimeUnixNano"] = ts
            if ev.topic in ("wave.finished", "wave.rebased"):
                spans[wid]["_closed"] = True
            parent = wid
        if ev.node_execution_id:
            aid = span_id("attempt", run_id, ev.node_execution_id)
            if aid not in spans and ev.topic == "task.dispatched":
                open_span(aid, f"attempt {ev.node_id or ev.task_id or ev.node_execution_id}",
                          parent, ev)
            if aid in spans:
                span = spans[aid]
                if not span.get("_closed"):
                    span["endTimeUnixNano"] = ts
                if ev.topic in ATTEMPT_END and not span.get("_closed"):
                    span["_closed"] = True
                    ok = ev.topic == "task.completed" and ev.payload.get("outcome", "succeeded") == "succeeded"
                    span["status"] = {"code": STATUS_OK if ok else STATUS_ERROR,
                                      "message": ev.topic}
                parent = aid
        if not run_span.get("_closed"):
            run_span["endTimeUnixNano"] = ts
        if ev.topic in ("run.finished", "run.cancelled"):
            run_span["_closed"] = True
            run_span["status"] = {"code": STATUS_OK if ev.topic == "run.finished" else STATUS_ERROR}
        failed = ev.topic in ("task.failed", "task.timeout", "task.lost", "patch.rejected")
        logs.append({
            "timeUnixNano": ts, "observedTimeUnixNano": ts,
            "severityNumber": 13 if failed else 9, "severityText": "WARN" if failed else "INFO",
            "body": {"stringValue": ev.topic}, "traceId": tid, "spanId": parent,
            "attributes": _correlation(ev) + [
                _attr("dome.topic", ev.topic), _attr("dome.sequence", ev.sequence),
                _attr("dome.event_id", ev.event_id), _attr("dome.record_digest", ev.record_digest),
                _attr("dome.payload_digest", ev.payload_digest),
                _attr("dome.signed", ev.signature is not None)],
        })
    out_spans = []
    for sid in order:
        span = {k: v for k, v in spans[sid].items() if not k.startswith("_")}
        out_spans.append(span)
    resource = {"attributes": [_attr("service.name", "dome"), _attr("dome.run_id", run_id)]}
    return {
        "resourceSpans": [{"resource": resource, "scopeSpans": [{"scope": SCOPE, "spans": out_spans}]}],
        "resourceLogs": [{"resource": resource, "scopeLogs": [{"scope": SCOPE, "logRecords": logs}]}],
    }


def write_projection(ledger, run_id: str, ops_root: Path | str | None = None) -> Path:
    """Project a run from the ledger to OPS_ROOT/runs/<run_id>/otel/otlp.json."""
    root = Path(ops_root) if ops_root is not None else ledger.ops_root
    out = root / "runs" / run_dir_name(run_id) / "otel" / "otlp.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(project(ledger.events(run_id)), indent=1, sort_keys=True).encode("utf-8")
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, out)
    return out
