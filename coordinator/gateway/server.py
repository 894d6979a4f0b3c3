"""The worker gateway: MCP (official SDK, streamable HTTP) on a Unix socket.

The grant is the bearer token (`Authorization: Bearer dgt1...`). tools/list
verifies the grant and lists only the tools it allows; tools/call verifies it
again for the named method (signature, audience, run binding, time,
revocation, method; for a sender-constrained grant the call proof in the
`dome-call-proof` header, signed by the attempt's worker key), then dispatches through the schema-validated
ToolDispatcher (the dispatch core shared with the MCP front door:
coordinator/toolcore.py). Handlers run in a worker thread (the ledger is synchronous);
results come back as `structuredContent`, errors as `isError` with the
ErrorObject. A refused tools/list is a JSON-RPC error REFUSED_RPC_CODE whose
`data` is the same ErrorObject a call gets. Rejections are recorded in the
ledger within the limits of ratelimit.RejectionLimiter, and not at all once
the run has finished. The server runs in a thread of the coordinator
process; only the socket is bound into worker sandboxes. The SDK runs in its
cheapest conforming mode: stateless, JSON responses (no SSE), tool schemas
looked up directly for the Mcp-Param header check, and no OpenTelemetry span
per request unless the process has a tracer provider set (`telemetry=True`
keeps them regardless). In front of the SDK's app, the direct path
(direct.DirectFront) answers a worker's tools/call in the sessionless
revision itself, after the same checks and with the SDK's bytes, its call in
a pool of handler threads as many as AnyIO's limiter allows the SDK path;
everything else is the SDK's (`direct=False` sends every request there).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import anyio
import mcp_types as types
import uvicorn
from mcp.server.lowlevel.server import Server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError

from registry import limits
from registry.canonical import digest_bytes
from registry import toolprofile as tp
from registry.errors import DomeError
from registry.grant_errors import GrantError

from .auth import GrantVerifier, gateway_audience, verify_for_listing
from .direct import DirectFront
from .dispatch import ToolDispatcher
from .handoff import HandlerPool
from .ratelimit import AGGREGATE, LIMITED_TOPIC, SUMMARY_TOPIC, RateLimited, RejectionLimiter, Verdict
from .worker_tools import AttemptNotLive, CallContext

HOST_HEADER = "dome-gateway"
REFUSED_RPC_CODE = -32001  # a JSON-RPC request refused with a typed ErrorObject in `data`
log = logging.getLogger("dome.gateway")


class GrantMissing(DomeError):
    code = "GRANT_MISSING"


class CarriedRefused(DomeError):
    code = "INVALID_REQUEST"
    retry = "none"


HANDLER_THREADS = 40  # as many as AnyIO's default thread limiter lets the SDK path run


def _bearer(ctx: Any) -> str:
    req = getattr(ctx, "request", None)
    return bearer_token(req.headers.get("authorization", "") if req is not None else "")


def bearer_token(header: str) -> str:
    if not header.lower().startswith("bearer "):
        raise GrantMissing("no bearer grant on the request")
    return header[7:].strip()


def _proof(ctx: Any) -> str | None:
    req = getattr(ctx, "request", None)
    return (req.headers.get(tp.PROOF_HEADER) or None) if req is not None else None


def tracing_configured() -> bool:
    """Whether this process has an OpenTelemetry tracer provider set (not the SDK's no-op proxy)."""
    from opentelemetry import trace
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _result(payload: dict[str, Any], *, error: bool) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(payload, sort_keys=True))],
                                structured_content=payload, is_error=error)


class _QuietServer(uvicorn.Server):
    """uvicorn's server, waking once a second (when it refreshes the Date header) rather than
    ten times a second: an idle gateway's thread spends a tenth of the CPU. stop() wakes it."""

    _loop: asyncio.AbstractEventLoop | None = None
    _wake: asyncio.Event | None = None

    async def main_loop(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        counter = 0  # on_tick refreshes the Date header when counter % 10 == 0: every tick here
        while not await self.on_tick(counter):
            counter = (counter + 10) % 864000
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 1.0)

    def wake(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already closed
                loop.call_soon_threadsafe(wake.set)


class WorkerGateway:
    def __init__(self, *, run_id: str, verifier: GrantVerifier, dispatcher: ToolDispatcher,
                 socket_path: Path, attempt: Any, audience: str | None = None,
                 limiter: RejectionLimiter | None = None,
                 clock: Callable[[], float] = time.time, telemetry: bool | None = None,
                 direct: bool = True) -> None:
        self.run_id = run_id
        self.verifier = verifier
        self.attempt = attempt
        self.audience = audience or gateway_audience()
        self.dispatcher = dispatcher
        self.socket_path = Path(socket_path)
        self.calls = 0
        self.one_commit = True  # a request's calls in one durable transaction (False: one per call)
        self.direct = direct  # a worker's tools/call answered by the direct path (False: all through the SDK)
        self.rejections: list[dict[str, Any]] = []  # the last few, for the run loop's view
        self.limiter = limiter or RejectionLimiter()
        self._clock = clock
        self._limit_lock = threading.Lock()
        self._server: _QuietServer | None = None
        self._thread: threading.Thread | None = None

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            try:
                token = _bearer(ctx)
                profile = await anyio.to_thread.run_sync(self._listing, token)
            except DomeError as exc:  # the same typed error a call gets, never a traceback
                raise MCPError(REFUSED_RPC_CODE, f"{exc.code}: {exc.message}", exc.to_object()) from None
            return types.ListToolsResult(tools=[
                types.Tool(name=s.name, description=s.description, input_schema=dict(s.input_schema))
                for s in self.dispatcher.visible(profile["allowed_methods"])])

        async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
            self.calls += 1
            name, args = params.name, dict(params.arguments or {})
            try:
                token = _bearer(ctx)
            except DomeError as exc:
                return _result(exc.to_object(), error=True)
            proof = _proof(ctx)
            payload, error = await anyio.to_thread.run_sync(lambda: self._call(token, proof, name, args))
            return _result(payload, error=error)

        def input_schema(name: str) -> Any:
            # the SDK checks Mcp-Param headers against this; without it, it would list the
            # tools again (with the caller's grant) for every call
            spec = self.dispatcher.specs.get(name)
            return dict(spec.input_schema) if spec is not None else None

        self.mcp = Server("dome-worker-gateway", version="1", on_list_tools=list_tools, on_call_tool=call_tool,
                          get_tool_input_schema=input_schema)
        if not (tracing_configured() if telemetry is None else telemetry):
            # the SDK's OpenTelemetry span per request, with no tracer to take it, is pure cost
            self.mcp.middleware = [m for m in self.mcp.middleware if type(m).__name__ != "OpenTelemetryMiddleware"]
        security = TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                             allowed_hosts=[HOST_HEADER], allowed_origins=[])
        self.sdk_app = self.mcp.streamable_http_app(stateless_http=True, json_response=True,
                                                    transport_security=security, host=HOST_HEADER,
                                                    max_request_body_size=limits.MAX_REQUEST_BYTES)
        self._pool = HandlerPool(HANDLER_THREADS, "dome-gateway-call")

        def on_call() -> None:
            self.calls += 1
        self.app = DirectFront(self.sdk_app, server=self.mcp, answer=self._answer, pool=self._pool,
                               enabled=lambda: self.direct, host=HOST_HEADER, proof_header=tp.PROOF_HEADER,
                               max_bytes=limits.MAX_REQUEST_BYTES, on_call=on_call,
                               tool_schemas=[s.input_schema for s in self.dispatcher.specs.values()])

    def _answer(self, authorization: str, proof: str | None, name: str,
                args: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """A tools/call as the direct path receives it: (payload, is_error), what call_tool answers."""
        try:
            token = bearer_token(authorization)
        except DomeError as exc:
            return exc.to_object(), True
        return self._call(token, proof, name, args)

    def _call(self, token: str, proof: str | None, name: str, args: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        outcome = self.dispatcher.guard(lambda: self._invoke(token, name, args, proof), tool=name)
        return outcome.result, not outcome.ok

    def _invoke(self, token: str, name: str, args: dict[str, Any], proof: str | None = None) -> dict[str, Any]:
        """Validate the arguments; run the carried calls, each as the call it is; then run the tool
        inside the verifier's authorize transaction.

        A request's calls commit once: each call's transaction is a savepoint of the request's
        (`batch`), so a refused call k rolls back alone and leaves calls 1..k-1, its own "failed"
        charge and its rejection to the one commit, exactly what k commits would have left. The
        answer is sent only after that commit is durable; a crash before it leaves none of the
        request's calls, none of which was answered."""
        spec = self.dispatcher.validate(name, args)
        carried = args.get("carried")
        if carried:
            with self._request_commit():
                done = [self._carried(token, c) for c in carried]
                plain = {k: v for k, v in args.items() if k != "carried"}  # what the call alone would hold
                return {**self._authorized(token, spec, name, args, proof, handler_args=plain), "carried": done}
        return self._authorized(token, spec, name, args, proof)

    def _request_commit(self) -> Any:
        batch = getattr(self.verifier.ledger, "batch", None)
        return batch() if batch is not None and self.one_commit else contextlib.nullcontext()

    def _carried(self, token: str, call: Mapping[str, Any]) -> dict[str, Any]:
        args = dict(call["arguments"])
        if "carried" in args:
            raise CarriedRefused("a carried call carries no calls of its own", details={"tool": call["tool"]})
        return {"tool": call["tool"], **self._invoke(token, call["tool"], args, call.get("proof"))}

    def _authorized(self, token: str, spec: Any, name: str, args: dict[str, Any], proof: str | None,
                    handler_args: dict[str, Any] | None = None) -> dict[str, Any]:
        neid = args.get("node_execution_id")
        att = self.attempt(neid) if isinstance(neid, str) else None
        if att is None:
            raise AttemptNotLive("no live attempt with this node_execution_id", details={"node_execution_id": neid})
        try:
            with self.verifier.authorize(token, method=name, run_id=self.run_id, wave_id=att["wave_id"],
                                         audience=self.audience, args=args, record_rejections=False,
                                         idempotency_key=args.get("idempotency_key"), proof=proof) as call:
                canon = call.grant.args_canonical if handler_args is None else None  # the proof check's
                return spec.handler(args if handler_args is None else handler_args,
                                    CallContext(profile=call.grant.payload, method=name, tx=call.tx,
                                                args_digest=digest_bytes(canon) if canon is not None else None))
        except GrantError as err:
            raise self._rejected(err, token=token, method=name, subject=f"attempt:{neid}",
                                 wave_id=att["wave_id"], node_execution_id=neid) from None

    def _listing(self, token: str) -> Any:
        try:
            return verify_for_listing(self.verifier, token, run_id=self.run_id, audience=self.audience)
        except GrantError as err:
            raise self._rejected(err, token=token, method="tools/list",
                                 subject="token:" + tp.token_digest(token)[7:23]) from None

    # -- rejected calls: recorded within the limiter's bounds ----------------------
    def _run_open(self) -> bool:
        """After run.finished the gateway records no rejections (only signed records may follow)."""
        finished = getattr(self.verifier.ledger, "run_finished", None)
        return not (finished is not None and finished())

    def _rejected(self, err: GrantError, *, token: str, method: str, subject: str,
                  wave_id: str | None = None, node_execution_id: str | None = None) -> DomeError:
        """Record one rejection (or not, past the limits); return the error to answer with."""
        answer = self._judge(err, token=token, method=method, subject=subject, wave_id=wave_id,
                             node_execution_id=node_execution_id)
        with self._limit_lock:
            self.rejections = self.rejections[-99:] + [{"method": method, **answer.to_object()}]
        return answer

    def _judge(self, err: GrantError, *, token: str, method: str, subject: str,
               wave_id: str | None, node_execution_id: str | None) -> DomeError:
        now = self._clock()
        with self._limit_lock:
            ended = self.limiter.roll(now)
            verdict = self.limiter.judge(subject, err.code, now)
            retry_after = self.limiter.retry_after(now)
            window = self.limiter.window_start
            scope = AGGREGATE if AGGREGATE in self.limiter.limited else subject
        if not self._run_open():
            return err if verdict is Verdict.RECORD else self._limited(err, subject, retry_after)
        if ended:
            self._summary(ended, now)
        if verdict is Verdict.RECORD:
            self.verifier.record_rejection(err, run_id=self.run_id, method=method, token=token, wave_id=wave_id,
                                           node_execution_id=node_execution_id)
            return err
        if verdict is Verdict.LIMIT:
            self.verifier.ledger.append(self.run_id, LIMITED_TOPIC, {
                "subject": scope, "code": err.code, "method": method, "window_started_at": round(window, 3),
                "window_s": self.limiter.window_s, "per_subject": self.limiter.per_subject,
                "aggregate": self.limiter.aggregate})
        return self._limited(err, subject, retry_after)

    def _limited(self, err: GrantError, subject: str, retry_after: float) -> RateLimited:
        return RateLimited(
            f"too many rejected calls ({err.code}); refused without recording until the window ends",
            details={"rejected_code": err.code, "subject": subject, "retry_after_s": retry_after,
                     "window_s": self.limiter.window_s, "per_subject": self.limiter.per_subject},
            hints=[f"retry after {retry_after} s with a valid grant"])

    def _summary(self, refused: dict[str, int], at: float) -> None:
        self.verifier.ledger.append(self.run_id, SUMMARY_TOPIC, {
            "refused": sum(refused.values()), "by_code": dict(sorted(refused.items())),
            "counted_at": round(at, 3), "window_s": self.limiter.window_s})

    def flush_rejections(self) -> None:
        """Count the current window's refused rejections now (at stop, while the run is open)."""
        with self._limit_lock:
            refused = dict(self.limiter.refused)
            self.limiter.refused = {}
        if refused and self._run_open():
            self._summary(refused, self._clock())

    def start(self, timeout: float = 10.0) -> None:
        if self.socket_path.exists():
            self.socket_path.unlink()
        config = uvicorn.Config(self.app, uds=str(self.socket_path), log_level="warning", lifespan="on",
                                access_log=False)
        self._server = _QuietServer(config)
        self._server.install_signal_handlers = lambda: None  # the run loop owns signals
        self._thread = threading.Thread(target=self._server.run, name="dome-gateway", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not (self._server.started and self.socket_path.exists()):
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("worker gateway did not start")
            time.sleep(0.01)
        os.chmod(self.socket_path, 0o666)

    def stop(self) -> None:
        self.flush_rejections()
        if self._server is not None:
            self._server.should_exit = True
            self._server.wake()
        if self._thread is not None:
            self._thread.join(5)
        self._pool.shutdown()
        if self.socket_path.exists():
            self.socket_path.unlink()
