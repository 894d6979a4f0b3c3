"""The MCP front door: an SDK `Server` over a `ToolHost`, on stdio or HTTP.

Both protocol eras the SDK speaks are served by the same handlers: the
initialize handshake (2025 versions) and the stateless per-request envelope
(2026-07-28). Handlers never write to stdout; the stdio path serves on the
private descriptors taken by `registry.stdio_guard`.
"""
from __future__ import annotations

import hmac
import os
import secrets
import warnings
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Collection

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types import INVALID_PARAMS

from . import artifacts, conformance
from .dispatch import ToolHost

SERVER_NAME = "dome"
INSTRUCTIONS = ("dome: lithography, layout (KLayout) and run orchestration tools. Long tools take wait=false "
                "and return a job_id for poll/cancel. Text is porcelain; pass render=json for JSON text; "
                "structuredContent always carries the full result.")


DISCONNECT_KEY = "dome.http_disconnected"
# 2025 clients still ask for logging; the SDK warns because the 2026-07-28 revision drops it
warnings.filterwarnings("ignore", message="The logging capability is deprecated", category=MCPDeprecationWarning)
RESOURCE_NOT_FOUND = -32002  # the MCP spec's code for resources/read of an unknown URI
_CONTENT = {"image": types.ImageContent, "resource_link": types.ResourceLink, "audio": types.AudioContent,
            "resource": types.EmbeddedResource}
LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


class _ClientLog:
    """notifications/message to the client at or above the level it set (logging/setLevel; default warning)."""

    def __init__(self) -> None:
        self.level = "warning"

    async def emit(self, ctx: Any, level: str, data: Any) -> None:
        if LEVELS.index(level) < LEVELS.index(self.level):
            return
        try:
            await ctx.session.send_log_message(level, data, logger="dome.mcp")
        except Exception:  # noqa: BLE001 - a log line never fails a call (e.g. the client has gone)
            pass


def _disconnect_event(ctx: Any) -> anyio.Event | None:
    """The event BearerAuth sets when this call's HTTP request loses its client (None off HTTP)."""
    scope = getattr(getattr(ctx, "request", None), "scope", None)
    return scope.get(DISCONNECT_KEY) if isinstance(scope, dict) else None


def build_server(host: ToolHost, *, allowed: Collection[str] | None = None) -> Server[Any]:
    """An SDK low-level Server whose tools/list and tools/call go through `host`."""
    tool_models = [types.Tool.model_validate(d, by_name=False) for d in host.list_tools(allowed)]
    log = _ClientLog()
    listing = types.ListToolsResult(tools=tool_models)

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return listing

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if host.resolve_tool(params.name, allowed) is None:  # a protocol error, not a tool result
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {params.name}",
                           data={"code": "UNKNOWN_TOOL", "tool": params.name,
                                 "hints": ["call tools/list for the tools you may use"]})

        async def progress(value: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(value, total, message)

        async def client_log(level: str, data: Any) -> None:
            await log.emit(ctx, level, data)

        disconnected = _disconnect_event(ctx)
        if disconnected is None:
            res = await host.call(params.name, params.arguments, progress=progress, allowed=allowed, log=client_log)
        else:
            # HTTP: the client going away cancels the call (and its job), as stdin EOF does on stdio
            res = None
            async with anyio.create_task_group() as tg:
                async def watch() -> None:
                    await disconnected.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(watch)
                res = await host.call(params.name, params.arguments, progress=progress, allowed=allowed,
                                      log=client_log)
                tg.cancel_scope.cancel()
            if res is None:
                raise MCPError(INVALID_PARAMS, "the client disconnected; the call was cancelled")
        await log.emit(ctx, "warning" if res.is_error else "info",
                       {"tool": params.name, "ok": not res.is_error,
                        **({"code": res.structured.get("code")} if res.is_error else {}),
                        **({"job_id": res.meta["dome/job_id"]} if "dome/job_id" in res.meta else {})})
        content: list[Any] = [types.TextContent(type="text", text=res.text)]
        content += [_CONTENT[c["type"]].model_validate(c, by_name=False) for c in res.content]
        return types.CallToolResult(content=content, structured_content=res.structured, is_error=res.is_error,
                                    _meta=res.meta or None)

    async def on_list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        cursor = getattr(params, "cursor", None) if params is not None else None
        items, nxt = artifacts.listing(host.ops_root, cursor)
        if conformance.enabled() and not cursor:
            items = conformance.resources() + items
        return types.ListResourcesResult(resources=[types.Resource.model_validate(r, by_name=False) for r in items],
                                         next_cursor=nxt)

    async def on_read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        fixture = conformance.read(str(params.uri)) if conformance.enabled() else None
        if fixture is not None:
            cls = types.TextResourceContents if "text" in fixture else types.BlobResourceContents
            return types.ReadResourceResult(contents=[cls.model_validate(fixture, by_name=False)])
        try:
            item = artifacts.read(host.ops_root, str(params.uri))
        except artifacts.ArtifactError as exc:
            raise MCPError(RESOURCE_NOT_FOUND, str(exc), data={"uri": str(params.uri)}) from None
        cls = types.TextResourceContents if "text" in item else types.BlobResourceContents
        return types.ReadResourceResult(contents=[cls.model_validate(item, by_name=False)])

    async def on_list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        items = [{"uriTemplate": artifacts.SCHEME + "{path}", "name": "artifact",
                  "description": "any file under the ops root's artifact folders (mcp/klayout, mcp/artifacts)"}]
        if conformance.enabled():
            items += conformance.templates()
        return types.ListResourceTemplatesResult(
            resource_templates=[types.ResourceTemplate.model_validate(t, by_name=False) for t in items])

    async def on_set_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
        log.level = params.level
        return types.EmptyResult()

    @asynccontextmanager
    async def lifespan(_server: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        async with host.running():
            yield {}

    from importlib.metadata import PackageNotFoundError, version
    try:
        ver = version("dome")
    except PackageNotFoundError:  # pragma: no cover - running from a checkout
        ver = "0.1.0"
    server: Server[Any] = Server(SERVER_NAME, version=ver, instructions=INSTRUCTIONS, lifespan=lifespan,
                                 on_list_tools=on_list_tools, on_call_tool=on_call_tool,
                                 on_list_resources=on_list_resources, on_read_resource=on_read_resource,
                                 on_list_resource_templates=on_list_templates,
                                 on_set_logging_level=on_set_level,
                                 get_tool_input_schema=lambda name: host.specs[name].input_schema
                                 if name in host.specs else None)
    server.middleware = []  # no per-message OTel span on the hot path; the host keeps its own telemetry
    return server


async def serve_stdio(host: ToolHost) -> None:
    from .transport import host_stdio

    server = build_server(host)
    async with host_stdio() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def http_token(state_dir: Path) -> str:
    """The bearer token: $DOME_MCP_TOKEN, else <ops>/mcp/http.token (created 0600 on first use)."""
    env = os.environ.get("DOME_MCP_TOKEN")
    if env:
        return env
    path = state_dir / "http.token"
    if not path.exists():
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(32))
    return path.read_text().strip()


class BearerAuth:
    """ASGI middleware: every request needs `Authorization: Bearer <token>` (constant-time compare).

    It also watches each request's `receive` channel: when the client disconnects, the request's
    event (in the ASGI scope, which the SDK hands to the tool handler) is set, and the call it
    carries is cancelled.
    """

    def __init__(self, app: Any, token: str | None) -> None:
        self.app = app
        self.token = token.encode() if token is not None else None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        auth = dict(scope.get("headers") or []).get(b"authorization", b"")
        ok = self.token is None or (auth[:7].lower() == b"bearer "
                                    and hmac.compare_digest(auth[7:].strip(), self.token))
        if not ok:
            body = b'{"code":"UNAUTHORIZED","message":"missing or wrong bearer token","retry":"none"}'
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"www-authenticate", b'Bearer realm="dome-mcp"')]})
            await send({"type": "http.response.body", "body": body})
            return
        disconnected = anyio.Event()
        scope[DISCONNECT_KEY] = disconnected

        async def watched_receive() -> Any:
            message = await receive()
            if message.get("type") == "http.disconnect":
                disconnected.set()
            return message

        await self.app(scope, watched_receive, send)


LOOPBACK = ("127.0.0.1", "::1", "localhost")


def build_http_app(host: ToolHost, token: str | None, *, bind_host: str = "127.0.0.1",
                   stateless: bool = False) -> Any:
    """The ASGI app; `token=None` (no bearer auth) only for a loopback bind."""
    server = build_server(host)
    app = server.streamable_http_app(stateless_http=stateless, host=bind_host, json_response=False)
    inner_lifespan = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[None]:
        async with host.running(), inner_lifespan(a):
            yield

    app.router.lifespan_context = lifespan
    if token is None and bind_host not in LOOPBACK:
        raise ValueError(f"serving without a bearer token is allowed on loopback only, not {bind_host}")
    from coordinator.observe.mcp_door import wrap  # /metrics and per-call telemetry (docs/operations.md)
    return BearerAuth(wrap(app, host), token)


def serve_http(host: ToolHost, bind: str, *, stateless: bool = False, auth: bool = True) -> None:
    import uvicorn

    addr, _, port = bind.rpartition(":")
    addr = addr.strip("[]") or "127.0.0.1"
    if not auth and addr not in LOOPBACK:
        raise ValueError(f"--no-auth is allowed on a loopback address only, not {addr}")
    token = http_token(host.state_dir) if auth else None
    app = build_http_app(host, token, bind_host=addr, stateless=stateless)
    uvicorn.run(app, host=addr, port=int(port), log_level="warning", lifespan="on")


def run_stdio(host: ToolHost) -> None:
    anyio.run(serve_stdio, host)
