"""Telemetry of the MCP front door: each tool call's latency and result into Prometheus
metrics, a span when OTEL_* asks for traces, and a JSON log line carrying the HTTP request
id when JSON logs are on. `instrument(host)` hooks the one place every call is counted
(`host.telemetry.call`); `wrap(app, ...)` adds GET /metrics and the request id to the HTTP
door. Any failure here is swallowed: a tool call never fails for its telemetry."""
from __future__ import annotations

import contextvars
import os
import secrets
import time
from typing import Any

from .metrics import Metrics

REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("dome_request_id", default=None)


class DoorTelemetry:
    def __init__(self, *, log_format: str = "text") -> None:
        from .tracing import sink_from_env

        self.metrics = Metrics()
        self.spans = sink_from_env()
        self.json_logs = log_format == "json"
        self.errors = 0

    def call(self, tool: str, ok: bool, ms: float, error: dict[str, Any] | None, *, client: str | None = None) -> None:
        code = (error or {}).get("code")
        rid = REQUEST_ID.get()
        try:
            self.metrics.tool_call(tool, ok=ok, ms=ms, code=code)
            if self.spans is not None:
                from ledger.otel import STATUS_ERROR, STATUS_OK, Span
                end = time.time_ns()
                attrs = {"dome.tool": tool, "dome.ok": ok, **({"dome.code": code} if code else {}),
                         **({"dome.request_id": rid} if rid else {}), **({"dome.client": client} if client else {})}
                self.spans.emit([Span(secrets.token_hex(16), secrets.token_hex(8), None, f"mcp {tool}",
                                      end - int(ms * 1e6), end, attrs, (STATUS_OK if ok else STATUS_ERROR, code),
                                      True)])
            if self.json_logs:
                from .logs import emit
                emit({"level": "info" if ok else "warning", "msg": "mcp.call", "tool": tool, "ok": ok,
                      "ms": round(ms, 3), "request_id": rid, **({"client": client} if client else {}),
                      **({"code": code} if code else {})})
        except Exception:  # noqa: BLE001
            self.errors += 1

    def close(self) -> None:
        if self.spans is not None:
            self.spans.close()


def instrument(host: Any, *, log_format: str | None = None) -> DoorTelemetry:
    """Hook a ToolHost's per-call telemetry (idempotent: a host is hooked once)."""
    existing = getattr(host, "door_telemetry", None)
    if existing is not None:
        return existing
    door = DoorTelemetry(log_format=log_format or os.environ.get("DOME_LOG_FORMAT", "text"))
    inner = host.telemetry.call

    def call(tool: str, *, ok: bool, ms: float, error: dict[str, Any] | None = None, retries: int = 0,
             client: str | None = None) -> None:
        inner(tool, ok=ok, ms=ms, error=error, retries=retries, client=client)
        door.call(tool, ok, ms, error, client=client)

    host.telemetry.call = call
    host.door_telemetry = door
    return door


def wrap(app: Any, host: Any) -> Any:
    """The HTTP door's app with GET /metrics (behind the same bearer token, as this wraps the
    app inside the auth) and a request id per HTTP request (`x-request-id`, else a new one)."""
    door = instrument(host)

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":  # the spans still in the exporter's batch leave at shutdown
            async def on_send(message: dict[str, Any]) -> None:
                if message.get("type") == "lifespan.shutdown.complete":
                    door.close()
                await send(message)
            return await app(scope, receive, on_send)
        if scope["type"] != "http":
            return await app(scope, receive, send)
        if scope["path"] == "/metrics" and scope["method"] == "GET":
            body, ctype = door.metrics.exposition()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", ctype.encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        rid = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")[:128]
        token = REQUEST_ID.set(rid or secrets.token_hex(8))
        try:
            await app(scope, receive, send)
        finally:
            REQUEST_ID.reset(token)

    return asgi
