"""The ASGI app of `dome serve`: read-only, bearer-token protected.

GET /               the runs and their status
GET /runs/RUN       the live run page (report drawing + tile map), updated by
GET /runs/RUN/events  server-sent events: `update` {seq, status, html, final}
GET /metrics        Prometheus text: the ledger's events through the one projection
Every request needs `Authorization: Bearer TOKEN` or the cookie that
GET /login?token=TOKEN sets (a browser cannot put a header on EventSource).
Anything but GET and HEAD is refused: nothing here writes.
"""
from __future__ import annotations

import asyncio
import hmac
import json
from pathlib import Path
from typing import Any

from .page import live_fragment, model_of, run_page, runs_page, sse

COOKIE = "dome_serve"
POLL_S = 0.5
TERMINAL = ("promoted", "completed", "blocked", "failed", "cancelled", "awaiting_consent")


class ServeState:
    """The ledger, its telemetry follower (for /metrics) and the ops root (run files)."""

    def __init__(self, ledger: Any, ops_root: Path, token: str) -> None:
        from coordinator.observe.follow import Follower
        from coordinator.observe.metrics import Metrics

        self.ledger, self.ops_root, self.token = ledger, Path(ops_root), token
        self.metrics = Metrics()
        self.follower = Follower(ledger, None, metrics=self.metrics)
        self.lock = asyncio.Lock()

    async def refresh_metrics(self) -> None:
        async with self.lock:  # one reader at a time; a scrape sees every event appended so far
            await asyncio.to_thread(self.follower.poll)

    def events(self, run_id: str) -> list[dict[str, Any]]:
        from coordinator.integration.recorder import readable_payload

        out = [json.loads(json.dumps(r.to_json())) for r in self.ledger.events(run_id)]
        for e in out:
            e["payload"] = readable_payload(str(e.get("topic", "")), e.get("payload"), self.ledger.blobs)
        return out

    def queue(self, run_id: str) -> dict[str, Any] | None:
        try:
            return json.loads((self.ops_root / "runs" / run_id / "work.queue.json").read_text())
        except (OSError, ValueError):
            return None

    def snapshot(self, run_id: str) -> dict[str, Any]:
        events = self.events(run_id)
        m = model_of(run_id, events)
        seq = int(events[-1]["sequence"]) if events else 0
        return {"seq": seq, "status": m.status, "final": m.status in TERMINAL,
                "html": live_fragment(m, self.queue(run_id))}

    def runs(self) -> list[dict[str, Any]]:
        from coordinator.runstate import fold

        rows = []
        for run_id in self.ledger.run_ids():
            events = self.ledger.events(run_id)
            st = fold(events)  # the status rule of `dome status`
            rows.append({"run_id": run_id, "status": str((st.finished or {}).get("status", "running")),
                         "events": len(events), "started": events[0].ts if events else ""})
        return rows


def authorized(headers: dict[bytes, bytes], cookies: str, token: str) -> bool:
    """Constant-time check of the bearer header or the session cookie. Pure."""
    want = token.encode()
    auth = headers.get(b"authorization", b"")
    if auth[:7].lower() == b"bearer " and hmac.compare_digest(auth[7:].strip(), want):
        return True
    for part in cookies.split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and hmac.compare_digest(value.encode(), want):
            return True
    return False


def build_app(state: ServeState, *, json_logs: bool = False) -> Any:
    """The read-only page's ASGI app; with `json_logs`, one JSON line on stderr per request
    (method, path, status, milliseconds, its request id and the run it names)."""
    app = _build_app(state)
    return _logged(app) if json_logs else app


def _logged(app: Any) -> Any:
    import secrets
    import time

    from coordinator.observe.logs import emit

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)
        t0, status = time.perf_counter(), [0]
        rid = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")[:128] or secrets.token_hex(8)

        async def watch(message: dict[str, Any]) -> None:
            if message.get("type") == "http.response.start":
                status[0] = int(message.get("status") or 0)
            await send(message)

        try:
            await app(scope, receive, watch)
        finally:
            parts = str(scope.get("path", "")).split("/")
            emit({"level": "info" if status[0] < 400 else "warning", "msg": "serve.request",
                  "method": scope.get("method"), "path": scope.get("path"), "status": status[0],
                  "ms": round((time.perf_counter() - t0) * 1e3, 3), "request_id": rid,
                  **({"run_id": parts[2]} if len(parts) > 2 and parts[1] == "runs" and parts[2] else {})})

    return asgi


def _build_app(state: ServeState) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
    from starlette.routing import Route

    def known(run_id: str) -> bool:
        return run_id in state.ledger.run_ids()

    async def runs(request: Request) -> Response:
        return HTMLResponse(runs_page(await asyncio.to_thread(state.runs)))

    async def runs_json(request: Request) -> Response:
        return JSONResponse({"runs": await asyncio.to_thread(state.runs)})

    async def run(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        if not await asyncio.to_thread(known, run_id):
            return JSONResponse({"code": "RUN_NOT_FOUND", "message": f"no run {run_id!r}"}, status_code=404)
        snap = await asyncio.to_thread(state.snapshot, run_id)
        return HTMLResponse(run_page(run_id, snap["seq"], snap["status"], snap["html"]))

    async def events(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        if not await asyncio.to_thread(known, run_id):
            return JSONResponse({"code": "RUN_NOT_FOUND", "message": f"no run {run_id!r}"}, status_code=404)

        async def stream():
            last = -1
            while True:
                head = await asyncio.to_thread(state.ledger.head, run_id)
                if head != last:
                    snap = await asyncio.to_thread(state.snapshot, run_id)
                    last = snap["seq"]
                    yield sse("update", snap)
                    if snap["final"]:
                        return
                else:
                    yield b": keep-alive\n\n"
                if await request.is_disconnected():
                    return
                await asyncio.sleep(POLL_S)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache", "x-accel-buffering": "no"})

    async def metrics(request: Request) -> Response:
        await state.refresh_metrics()
        body, ctype = state.metrics.exposition()
        return Response(body, media_type=ctype)

    async def login(request: Request) -> Response:
        resp = RedirectResponse("/", status_code=303)
        resp.set_cookie(COOKIE, request.query_params.get("token", ""), httponly=True, samesite="strict")
        return resp

    app = Starlette(routes=[Route("/", runs), Route("/runs.json", runs_json), Route("/runs/{run_id}", run),
                            Route("/runs/{run_id}/events", events), Route("/metrics", metrics)])
    login_route = Route("/login", login)

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            if scope["method"] not in ("GET", "HEAD"):
                return await _plain(send, 405, b'{"code":"READ_ONLY","message":"dome serve only reads"}')
            if scope["path"] == "/login":
                return await Starlette(routes=[login_route])(scope, receive, send)
            headers = dict(scope.get("headers") or [])
            if not authorized(headers, headers.get(b"cookie", b"").decode("latin-1"), state.token):
                return await _plain(send, 401, b'{"code":"UNAUTHORIZED","message":"missing or wrong bearer token"}',
                                    extra=[(b"www-authenticate", b'Bearer realm="dome-serve"')])
        await app(scope, receive, send)

    return guarded


async def _plain(send: Any, status: int, body: bytes, extra: list | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json")] + (extra or [])})
    await send({"type": "http.response.body", "body": body})
