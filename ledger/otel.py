"""OpenTelemetry projection of ControlEvents (OTLP/JSON-shaped spans and logs).

A projection, never control truth: if it disagrees with the ledger, the
ledger wins. Ids are stable functions of the ledger's correlation keys, so
re-projecting the same run gives the same trace:

- trace id   = first 16 bytes of sha256("dome.trace:" + run_id)
- run span   = run.started .. run.finished (or the last event)
- wave span  = wave.started .. wave.finished/rebased (or the wave's last event)
- attempt span (one per node_execution_id) = task.dispatched .. its terminal event
- gateway call span (one per grant.call, under its attempt) = the call's `at` .. its record
- integration step span (one per integration event, under the run): verify, plan, apply,
  validate (its report's duration), bisect, gate, promote
- one log record per event, linked to its attempt/wave/run span, carrying
  dome.sequence, dome.event_id, dome.record_digest and every correlation key.

`Projector` is the one projection: events in (in order), closed spans and metric
observations out. `project` (the file) feeds it all at once; the live exporters
(coordinator.observe) feed it as events are appended, so both carry the same spans.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
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
    return [_attr(k, v) for k, v in correlation(ev).items()]


def correlation(ev: EventRecord) -> dict[str, str]:
    """The ledger's correlation keys of one event, as span attributes."""
    attrs = {"dome.run_id": ev.run_id}
    for key in ("wave_id", "node_id", "node_execution_id", "task_id"):
        value = getattr(ev, key)
        if value is not None:
            attrs[f"dome.{key}"] = value
    return attrs


# integration topics -> the step they belong to (one span per recorded step)
STEPS = {
    "integration.proposal_verified": "verify", "integration.proposal_rejected": "verify",
    "integration.stack_plan": "plan", "integration.selection_decision": "plan",
    "integration.checkpoint": "apply", "integration.apply_result": "apply",
    "integration.conflict_decision": "apply", "integration.split_request": "apply",
    "integration.split_result": "apply", "integration.ejected": "apply",
    "integration.resolver_request": "apply",
    "integration.validation_report": "validate", "integration.bisect": "bisect",
    "gate.computed": "gate", "promotion.computed": "promote",
    "promotion.consent_requested": "promote", "promotion.consent_granted": "promote",
}
GATEWAY_CALL = "grant.call"


@dataclass
class Span:
    """One span of the projection; `closed` once its last event was seen."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status: tuple[int, str | None] = (0, None)
    closed: bool = False

    def otlp(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "traceId": self.trace_id, "spanId": self.span_id, "name": self.name, "kind": 1,
            "startTimeUnixNano": str(self.start_ns), "endTimeUnixNano": str(self.end_ns),
            "attributes": [_attr(k, v) for k, v in self.attributes.items()],
            "status": {"code": self.status[0], **({"message": self.status[1]} if self.status[1] else {})}}
        if self.parent_id:
            out["parentSpanId"] = self.parent_id
        return out


@dataclass(frozen=True)
class Observation:
    """A metric sample the projection derives from an event: `histogram` seconds or a
    `counter` increment, with its labels."""

    metric: str
    value: float
    labels: tuple[tuple[str, str], ...] = ()


def _ns(ts: str) -> int:
    return int(_nanos(ts))


def attempt_outcome(ev: EventRecord) -> str:
    if ev.topic == "task.completed":
        return str(ev.payload.get("outcome") or "succeeded")
    return ev.topic.split(".", 1)[1]


class Projector:
    """Events in, spans and metric observations out: the one projection of a run's events
    to telemetry. `feed` takes each event in sequence order and returns the spans it
    closed and the observations it made; `project` (the file) and the live exporters
    (coordinator.observe) both feed it, so their ids and times agree."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.trace_id = trace_id(run_id)
        self.root = span_id("run", run_id)
        self.spans: dict[str, Span] = {}
        self.last_ns: int | None = None

    def _open(self, sid: str, name: str, parent: str | None, ev: EventRecord, ts: int,
              start: int | None = None) -> Span:
        span = Span(self.trace_id, sid, parent, name, ts if start is None else start, ts,
                    {**correlation(ev), "dome.start_sequence": ev.sequence, "dome.start_event_id": ev.event_id})
        self.spans[sid] = span
        return span

    def feed(self, ev: EventRecord) -> tuple[list[Span], list[Observation]]:
        ts = _ns(ev.ts)
        closed: list[Span] = []
        obs: list[Observation] = []
        run_id, spans = self.run_id, self.spans
        run_span = spans.get(self.root) or self._open(self.root, f"run {run_id}", None, ev, ts)
        parent = self.root
        if ev.wave_id:
            wid = span_id("wave", run_id, ev.wave_id)
            wave = spans.get(wid) or self._open(wid, f"wave {ev.wave_id}", self.root, ev, ts)
            if not wave.closed:
                wave.end_ns = ts
                if ev.topic in ("wave.finished", "wave.rebased"):
                    wave.closed = True
                    closed.append(wave)
            parent = wid
        if ev.node_execution_id:
            aid = span_id("attempt", run_id, ev.node_execution_id)
            att = spans.get(aid)
            if att is None and ev.topic == "task.dispatched":
                att = self._open(aid, f"attempt {ev.node_id or ev.task_id or ev.node_execution_id}", parent, ev, ts)
            if att is not None:
                if not att.closed:
                    att.end_ns = ts
                    if ev.topic in ATTEMPT_END:
                        att.closed = True
                        outcome = attempt_outcome(ev)
                        att.status = (STATUS_OK if outcome == "succeeded" else STATUS_ERROR, ev.topic)
                        closed.append(att)
                        obs.append(Observation("attempt_duration_seconds", (att.end_ns - att.start_ns) / 1e9))
                        obs.append(Observation("attempts_total", 1, (("outcome", outcome),)))
                parent = aid
        topic = ev.topic
        if topic == GATEWAY_CALL:
            closed.append(self._call(ev, ts, parent, obs))
        elif topic in STEPS:
            closed.append(self._step(ev, ts, obs))
        else:
            obs.extend(_counters(ev))
        if not run_span.closed:
            run_span.end_ns = ts
            if topic in ("run.finished", "run.cancelled"):
                run_span.closed = True
                run_span.status = (STATUS_OK if topic == "run.finished" else STATUS_ERROR, None)
                closed.append(run_span)
        self.last_ns = ts
        return closed, obs

    def _call(self, ev: EventRecord, ts: int, parent: str, obs: list[Observation]) -> Span:
        p = ev.payload
        at = p.get("at")
        start = min(ts, int(float(at) * 1e9)) if isinstance(at, (int, float)) else ts
        method = str(p.get("method") or "?")
        span = self._open(span_id("call", self.run_id, ev.event_id), f"gateway {method}", parent, ev, ts, start)
        span.attributes.update({"dome.method": method, "dome.outcome": str(p.get("outcome") or "")})
        span.closed = True
        span.status = (STATUS_OK if p.get("outcome", "ok") == "ok" else STATUS_ERROR, None)
        obs.append(Observation("gateway_call_seconds", (ts - start) / 1e9, (("method", method),)))
        return span

    def _step(self, ev: EventRecord, ts: int, obs: list[Observation]) -> Span:
        step = STEPS[ev.topic]
        start = self.last_ns if self.last_ns is not None else ts
        dur = ev.payload.get("duration_s")
        if step == "validate" and isinstance(dur, (int, float)):
            start = ts - int(float(dur) * 1e9)
        start = min(start, ts)
        span = self._open(span_id("step", self.run_id, ev.event_id), f"integration {step}", self.root, ev, ts, start)
        span.attributes.update({"dome.step": step, "dome.topic": ev.topic})
        span.closed = True
        obs.append(Observation("integration_step_seconds", (ts - start) / 1e9, (("step", step),)))
        obs.extend(_counters(ev))
        return span

    def open_spans(self) -> list[Span]:
        return [s for s in self.spans.values() if not s.closed]


def _counters(ev: EventRecord) -> list[Observation]:
    """The counters one event adds to (proposals by fate, gate decisions, consent, refusals, egress)."""
    t, p = ev.topic, ev.payload
    if t == "integration.apply_result":
        return [Observation("proposals_total", 1, (("fate", "applied" if p.get("applied") else
                                                    str(p.get("decision") or "not_applied")),))]
    if t in ("integration.proposal_rejected", "patch.rejected"):
        return [Observation("proposals_total", 1, (("fate", "rejected"),))]
    if t == "patch.submitted":
        return [Observation("proposals_total", 1, (("fate", "submitted"),))]
    if t == "gate.computed":
        return [Observation("gate_decisions_total", 1, (("decision", "blocked" if p.get("missing") else "pass"),))]
    if t == "promotion.consent_requested":
        return [Observation("consent_requests_total", 1)]
    if t in ("grant.rejected", "egress.refused"):
        code = str(p.get("code") or (p.get("error") or {}).get("code") or "UNKNOWN")
        out = [Observation("grant_refusals_total", 1, (("code", code),))]
        if code.startswith("CONSENT"):
            out.append(Observation("consent_denials_total", 1))
        if code in SCHEMA_CODES:
            out.append(Observation("schema_failures_total", 1, (("where", "gateway"),)))
        return out
    if t == "model.call":
        return [Observation("egress_tokens_total", float(p.get("tokens_in") or 0), (("direction", "in"),)),
                Observation("egress_tokens_total", float(p.get("tokens_out") or 0), (("direction", "out"),)),
                Observation("egress_cost_micros_total", float(p.get("cost_micros") or 0))]
    return []


# error codes that mean a request failed its schema
SCHEMA_CODES = frozenset({"INVALID_REQUEST", "SCHEMA_VALIDATION", "INVALID_ARGUMENTS"})


def project(events: Iterable[EventRecord]) -> dict[str, Any]:
    """{"resourceSpans": [...], "resourceLogs": [...]} for one run's events."""
    evs = list(events)
    if not evs:
        return {"resourceSpans": [], "resourceLogs": []}
    run_id = evs[0].run_id
    proj = Projector(run_id)
    logs = []
    for ev in evs:
        proj.feed(ev)
        logs.append(log_record(proj, ev))
    resource = {"attributes": [_attr("service.name", "dome"), _attr("dome.run_id", run_id)]}
    out_spans = [s.otlp() for s in proj.spans.values()]
    return {
        "resourceSpans": [{"resource": resource, "scopeSpans": [{"scope": SCOPE, "spans": out_spans}]}],
        "resourceLogs": [{"resource": resource, "scopeLogs": [{"scope": SCOPE, "logRecords": logs}]}],
    }


def log_parent(proj: Projector, ev: EventRecord) -> str:
    """The span an event's log record hangs on: its attempt's, else its wave's, else the run's."""
    if ev.node_execution_id:
        aid = span_id("attempt", proj.run_id, ev.node_execution_id)
        if aid in proj.spans:
            return aid
    if ev.wave_id:
        return span_id("wave", proj.run_id, ev.wave_id)
    return proj.root


def log_record(proj: Projector, ev: EventRecord) -> dict[str, Any]:
    ts = _nanos(ev.ts)
    failed = ev.topic in ("task.failed", "task.timeout", "task.lost", "patch.rejected")
    return {
        "timeUnixNano": ts, "observedTimeUnixNano": ts,
        "severityNumber": 13 if failed else 9, "severityText": "WARN" if failed else "INFO",
        "body": {"stringValue": ev.topic}, "traceId": proj.trace_id, "spanId": log_parent(proj, ev),
        "attributes": _correlation(ev) + [
            _attr("dome.topic", ev.topic), _attr("dome.sequence", ev.sequence),
            _attr("dome.event_id", ev.event_id), _attr("dome.record_digest", ev.record_digest),
            _attr("dome.payload_digest", ev.payload_digest),
            _attr("dome.signed", ev.signature is not None)],
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
