"""Live spans through the OpenTelemetry SDK, off unless the standard OTEL_* variables ask.

The spans come from `ledger.otel.Projector` (the file projection's own code), so their
trace and span ids are the file's. They are handed to the SDK's BatchSpanProcessor as
finished `ReadableSpan`s with those ids; the SDK's OTLP/HTTP exporter reads its endpoint,
headers, timeout and compression from the environment. A failed export is counted
(`failures`), never raised: the ledger is the truth and a run never waits on a collector.
"""
from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from registry.errors import DomeError

if TYPE_CHECKING:
    from ledger.otel import Span

ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
EXPORTERS = ("otlp", "console", "none")
CLOSE_FLUSH_S = 3.0


class TelemetryConfigInvalid(DomeError):
    code = "TELEMETRY_CONFIG_INVALID"


def tracing_wanted(env: Mapping[str, str]) -> str | None:
    """Which exporter the environment asks for ("otlp", "console"), or None (tracing off). Pure."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    bad = [n for n in names if n not in EXPORTERS]
    if bad:
        raise TelemetryConfigInvalid(f"OTEL_TRACES_EXPORTER names an exporter dome does not have: {bad[0]}",
                                     details={"value": env["OTEL_TRACES_EXPORTER"], "known": list(EXPORTERS)})
    proto = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if proto and proto != "http/protobuf":
        raise TelemetryConfigInvalid(f"OTLP protocol {proto!r} is not served; use http/protobuf",
                                     details={"value": proto})
    if names:
        chosen = [n for n in names if n != "none"]
        return chosen[0] if chosen else None
    return "otlp" if any(env.get(v) for v in ENDPOINT_VARS) else None


class _Counting:
    """The exporter, with failures and exceptions counted instead of raised."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.failures = 0
        self.exported = 0

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult
        try:
            result = self.inner.export(spans)
        except Exception:  # noqa: BLE001 - a collector problem never reaches the run
            result = SpanExportResult.FAILURE
        if result == SpanExportResult.SUCCESS:
            self.exported += len(spans)
        else:
            self.failures += 1
        return result

    def shutdown(self) -> None:
        try:
            self.inner.shutdown()
        except Exception:  # noqa: BLE001
            pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        try:
            return bool(getattr(self.inner, "force_flush", lambda *_: True)(timeout_millis))
        except Exception:  # noqa: BLE001
            return False


class SpanSink:
    """Finished projection spans -> the SDK's batch processor -> the configured exporter."""

    def __init__(self, exporter: Any, *, service: str = "dome") -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self.exporter = _Counting(exporter)
        # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES are read by Resource.create
        self.resource = Resource.create({"service.name": service}) if not os.environ.get("OTEL_SERVICE_NAME") \
            else Resource.create()
        self.scope = InstrumentationScope("dome.ledger", "1")
        # a batch leaves at least every second (OTEL_BSP_SCHEDULE_DELAY overrides): a door that is
        # killed rather than stopped loses at most that much
        delay = int(os.environ.get("OTEL_BSP_SCHEDULE_DELAY") or 1000)
        self.processor = BatchSpanProcessor(self.exporter, schedule_delay_millis=delay)
        self.lock = threading.Lock()

    @property
    def failures(self) -> int:
        return self.exporter.failures

    def emit(self, spans: Sequence[Span]) -> None:
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
        from opentelemetry.trace.status import Status, StatusCode

        from ledger.otel import STATUS_ERROR, STATUS_OK

        codes = {0: StatusCode.UNSET, STATUS_OK: StatusCode.OK, STATUS_ERROR: StatusCode.ERROR}
        for s in spans:
            tid, sid = int(s.trace_id, 16), int(s.span_id, 16)
            ctx = SpanContext(tid, sid, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
            parent = (SpanContext(tid, int(s.parent_id, 16), is_remote=False,
                                  trace_flags=TraceFlags(TraceFlags.SAMPLED)) if s.parent_id else None)
            code = codes[s.status[0]]
            rs = ReadableSpan(name=s.name, context=ctx, parent=parent, resource=self.resource,
                              attributes=dict(s.attributes), kind=SpanKind.INTERNAL,
                              status=Status(code, s.status[1] if code == StatusCode.ERROR else None),
                              start_time=s.start_ns, end_time=s.end_ns, instrumentation_scope=self.scope)
            try:
                self.processor.on_end(rs)
            except Exception:  # noqa: BLE001
                self.exporter.failures += 1

    def close(self, flush_s: float = CLOSE_FLUSH_S) -> None:
        """Flush for at most `flush_s`, then stop: a collector that is down delays the end of a
        command by that much, not by the exporter's retries."""
        try:
            if not self.processor.force_flush(int(flush_s * 1000)):
                self.exporter.failures += 1
            self.exporter.shutdown()  # interrupts a retry still sleeping
            self.processor.shutdown()
        except Exception:  # noqa: BLE001
            self.exporter.failures += 1


def sink_from_env(env: Mapping[str, str] | None = None) -> SpanSink | None:
    """The span sink the environment asks for, or None. A bad value raises TelemetryConfigInvalid
    (at the start of a command, before any work); a missing SDK is said the same way."""
    env = os.environ if env is None else env
    kind = tracing_wanted(env)
    if kind is None:
        return None
    try:
        if kind == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter
            import sys
            return SpanSink(ConsoleSpanExporter(out=sys.stderr))
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        return SpanSink(OTLPSpanExporter())
    except ImportError as exc:
        raise TelemetryConfigInvalid("OTEL_* asks for traces but the OpenTelemetry SDK is not installed",
                                     details={"missing": str(exc)},
                                     hints=["pip install 'dome[otel]'"]) from None
