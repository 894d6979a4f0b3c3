"""The worker gateway: MCP (official SDK, streamable HTTP) on a Unix socket.

The grant is the bearer token (`Authorization: Bearer dgt1...`). tools/list
verifies the grant and lists only the tools it allows; tools/call verifies it
again for the named method (signature, audience, run binding, time,
revocation, method), then dispatches through the schema-validated
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

from .auth import GrantAuthority, GrantRejected
from .dispatch import ToolDispatcher, error_object
from .worker_tools import CallContext

HOST_HEADER = "dome-gateway"
log = logging.getLogger("dome.gateway")


def _bearer(ctx: Any) -> str:
    req = getattr(ctx, "request", None)
    header = req.headers.get("authorization", "") if req is not None else ""
    if not header.lower().startswith("bearer "):
        raise GrantRejected("no bearer grant on the request", details={"code": "GRANT_MISSING"})
    return header[7:].strip()


def _result(payload: dict[str, Any], *, error: bool) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(payload, sort_keys=True))],
                                structured_content=payload, is_error=error)


class WorkerGateway:
    def __init__(self, *, run_id: str, authority: GrantAuthority, dispatcher: ToolDispatcher,
                 socket_path: Path) -> None:
        self.run_id = run_id
        self.authority = authority
        self.dispatcher = dispatcher
        self.socket_path = Path(socket_path)
        self.calls = 0
        self.rejections: list[dict[str, Any]] = []
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            profile = self.authority.verify(_bearer(ctx), method=None, run_id=self.run_id)
            return types.ListToolsResult(tools=[
                types.Tool(name=s.name, description=s.description, input_schema=dict(s.input_schema))
                for s in self.dispatcher.visible(profile["allowed_methods"])])

        async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
            self.calls += 1
            name, args = params.name, dict(params.arguments or {})
            try:
                profile = self.authority.verify(_bearer(ctx), method=name, run_id=self.run_id)
            except GrantRejected as exc:
                self.rejections.append({"method": name, **exc.to_object()})
                return _result(exc.to_object(), error=True)
            call = CallContext(profile=profile, method=name)
            outcome = await anyio.to_thread.run_sync(self.dispatcher.call, name, args, call)
            return _result(outcome.result, error=not outcome.ok)

        self.mcp = Server("dome-worker-gateway", version="1", on_list_tools=list_tools, on_call_tool=call_tool)
        security = TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                             allowed_hosts=[HOST_HEADER], allowed_origins=[])
        self.app = self.mcp.streamable_http_app(stateless_http=True, json_response=True,
                                                transport_security=security, host=HOST_HEADER)

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
