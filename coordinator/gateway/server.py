"""The worker gateway: MCP (official SDK, streamable HTTP) on a Unix socket.

The grant is the bearer token (`Authorization: Bearer dgt1...`). tools/list
verifies the grant and lists only the tools it allows; tools/call verifies it
again for the named method (signature, audience, run binding, time,
revocation, method; for a sender-constrained grant the call proof in the
`dome-call-proof` header, signed by the attempt's worker key), then dispatches through the schema-validated
ToolDispatcher. Handlers run in a worker thread (the ledger is synchronous);
results come back as `structuredContent`, errors as `isError` with the
ErrorObject. The server runs in a thread of the coordinator process; only
the socket is bound into worker sandboxes.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import uvicorn
from mcp.server.lowlevel.server import Server
from mcp.server.transport_security import TransportSecuritySettings

from registry import limits
from registry.errors import DomeError

from .auth import PROOF_HEADER, GrantVerifier, gateway_audience, verify_for_listing
from .dispatch import ToolDispatcher
from .worker_tools import AttemptNotLive, CallContext

HOST_HEADER = "dome-gateway"
log = logging.getLogger("dome.gateway")


class GrantMissing(DomeError):
    code = "GRANT_MISSING"


def _bearer(ctx: Any) -> str:
    req = getattr(ctx, "request", None)
    header = req.headers.get("authorization", "") if req is not None else ""
    if not header.lower().startswith("bearer "):
        raise GrantMissing("no bearer grant on the request")
    return header[7:].strip()


def _proof(ctx: Any) -> str | None:
    req = getattr(ctx, "request", None)
    return (req.headers.get(PROOF_HEADER) or None) if req is not None else None


def _result(payload: dict[str, Any], *, error: bool) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(payload, sort_keys=True))],
                                structured_content=payload, is_error=error)


class WorkerGateway:
    def __init__(self, *, run_id: str, verifier: GrantVerifier, dispatcher: ToolDispatcher,
                 socket_path: Path, attempt: Any, audience: str | None = None) -> None:
        self.run_id = run_id
        self.verifier = verifier
        self.attempt = attempt
        self.audience = audience or gateway_audience()
        self.dispatcher = dispatcher
        self.socket_path = Path(socket_path)
        self.calls = 0
        self.rejections: list[dict[str, Any]] = []
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            profile = verify_for_listing(self.verifier, _bearer(ctx), run_id=self.run_id, audience=self.audience)
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
            outcome = await anyio.to_thread.run_sync(self.dispatcher.guard,
                                                     lambda: self._invoke(token, name, args, proof))
            if not outcome.ok and str(outcome.result.get("code", "")).startswith("GRANT_"):
                self.rejections.append({"method": name, **outcome.result})
            return _result(outcome.result, error=not outcome.ok)

        self.mcp = Server("dome-worker-gateway", version="1", on_list_tools=list_tools, on_call_tool=call_tool)
        security = TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                             allowed_hosts=[HOST_HEADER], allowed_origins=[])
        self.app = self.mcp.streamable_http_app(stateless_http=True, json_response=True,
                                                transport_security=security, host=HOST_HEADER,
                                                max_request_body_size=limits.MAX_REQUEST_BYTES)

    def _invoke(self, token: str, name: str, args: dict[str, Any], proof: str | None = None) -> dict[str, Any]:
        """Validate the arguments, then run the tool inside the verifier's authorize transaction."""
        spec = self.dispatcher.validate(name, args)
        neid = args.get("node_execution_id")
        att = self.attempt(neid) if isinstance(neid, str) else None
        if att is None:
            raise AttemptNotLive("no live attempt with this node_execution_id", details={"node_execution_id": neid})
        with self.verifier.authorize(token, method=name, run_id=self.run_id, wave_id=att["wave_id"],
                                     audience=self.audience, args=args,
                                     idempotency_key=args.get("idempotency_key"), proof=proof) as call:
            return spec.handler(args, CallContext(profile=call.grant.payload, method=name, tx=call.tx))

    def start(self, timeout: float = 10.0) -> None:
        if self.socket_path.exists():
            self.socket_path.unlink()
        config = uvicorn.Config(self.app, uds=str(self.socket_path), log_level="warning", lifespan="on",
                                access_log=False)
        self._server = uvicorn.Server(config)
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
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(5)
        if self.socket_path.exists():
            self.socket_path.unlink()
