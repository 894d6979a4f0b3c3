"""The MCP front door: an SDK `Server` over a `ToolHost`, on stdio or HTTP.

Both protocol eras the SDK speaks are served by the same handlers: the
initialize handshake (2025 versions) and the stateless per-request envelope
(2026-07-28). Handlers never write to stdout; the stdio path serves on the
private descriptors taken by `registry.stdio_guard`.
"""
from __future__ import annotations

import os
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Collection

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

from . import artifacts, conformance
from .dispatch import ToolHost
from .identity import LOCAL, Client, ClientBook, stdio_client
from .httpguard import CLIENT_KEY, DISCONNECT_KEY, HttpGuard, header_timeout_protocol

SERVER_NAME = "dome"
INSTRUCTIONS = ("dome: lithography, layout (KLayout) and run orchestration tools. Long tools take wait=false "
                "and return a job_id for poll/cancel. Text is porcelain; pass render=json for JSON text; "
                "structuredContent always carries the full result.")


RESOURCE_NOT_FOUND = -32002  # the MCP spec's code for resources/read of an unknown URI
_CONTENT = {"image": types.ImageContent, "resource_link": types.ResourceLink, "audio": types.AudioContent,
            "resource": types.EmbeddedResource}


def _scope(ctx: Any) -> dict[str, Any] | None:
    scope = getattr(getattr(ctx, "request", None), "scope", None)
    return scope if isinstance(scope, dict) else None


def _disconnect_event(ctx: Any) -> anyio.Event | None:
    """The event HttpGuard sets when this call's HTTP request loses its client (None off HTTP)."""
    scope = _scope(ctx)
    return scope.get(DISCONNECT_KEY) if scope is not None else None


def build_server(host: ToolHost, *, allowed: Collection[str] | None = None,
                 client: Client | None = None) -> Server[Any]:
    """An SDK low-level Server whose tools/list and tools/call go through `host`.

    `client`: who calls when the transport does not say (stdio: the process that started the door);
    over HTTP each request names its client (HttpGuard puts it in the ASGI scope).
    """
    fixed = client or LOCAL
    listings: dict[str | None, types.ListToolsResult] = {}  # per client scope: built once

    def caller(ctx: Any) -> Client:
        scope = _scope(ctx)
        named = scope.get(CLIENT_KEY) if scope is not None else None
        return named if isinstance(named, Client) else fixed

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        who = caller(ctx)
        listing = listings.get(who.scope)
        if listing is None:
            tools = host.list_tools(host.for_client(who, allowed))
            listing = listings[who.scope] = types.ListToolsResult(
                tools=[types.Tool.model_validate(d, by_name=False) for d in tools])
        return listing

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        who = caller(ctx)
        if host.resolve_tool(params.name, host.for_client(who, allowed)) is None:  # a protocol error
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {params.name}",
                           data={"code": "UNKNOWN_TOOL", "tool": params.name,
                                 "hints": ["call tools/list for the tools you may use"]})

        async def progress(value: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(value, total, message)

        disconnected = _disconnect_event(ctx)
        if disconnected is None:
            res = await host.call(params.name, params.arguments, progress=progress, allowed=allowed, client=who)
        else:
            # HTTP: the client going away cancels the call (and its job), as stdin EOF does on stdio
            res = None
            async with anyio.create_task_group() as tg:
                async def watch() -> None:
                    await disconnected.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(watch)
                res = await host.call(params.name, params.arguments, progress=progress, allowed=allowed,
                                      client=who)
                tg.cancel_scope.cancel()
            if res is None:
                raise MCPError(INVALID_PARAMS, "the client disconnected; the call was cancelled")
        content: list[Any] = [types.TextContent(type="text", text=res.text)]
        content += [_CONTENT[c["type"]].model_validate(c, by_name=False) for c in res.content]
        return types.CallToolResult(content=content, structured_content=res.structured, is_error=res.is_error,
                                    _meta=res.meta or None)

    async def on_list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        cursor = getattr(params, "cursor", None) if params is not None else None
        items, nxt = artifacts.listing(host.ops_root, cursor, host.artifact_filter(caller(ctx)))
        if conformance.enabled() and not cursor:
            items = conformance.resources() + items
        return types.ListResourcesResult(resources=[types.Resource.model_validate(r, by_name=False) for r in items],
                                         next_cursor=nxt)

    async def on_read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        fixture = conformance.read(str(params.uri)) if conformance.enabled() else None
        if fixture is not None:
            cls = types.TextResourceContents if "text" in fixture else types.BlobResourceContents
            return types.ReadResourceResult(contents=[cls.model_validate(fixture, by_name=False)])
        uri = str(params.uri)
        try:
            if not host.artifact_filter(caller(ctx))(uri):  # another client's: as if it did not exist
                raise artifacts.ArtifactError(f"no artifact {artifacts.shown(uri)}")
            item = artifacts.read(host.ops_root, uri)
        except artifacts.ArtifactError as exc:
            raise MCPError(RESOURCE_NOT_FOUND, str(exc), data={"uri": artifacts.shown(uri)}) from None
        except Exception:  # noqa: BLE001 - never a host path or a traceback to the client
            raise MCPError(INTERNAL_ERROR, "resources/read failed", data={"uri": artifacts.shown(uri)}) from None
        cls = types.TextResourceContents if "text" in item else types.BlobResourceContents
        return types.ReadResourceResult(contents=[cls.model_validate(item, by_name=False)])

    async def on_list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        items = [{"uriTemplate": artifacts.SCHEME + "{path}", "name": "artifact",
                  "description": "any file under the ops root's artifact folders (mcp/klayout, mcp/artifacts)"}]
        if conformance.enabled():
            items += conformance.templates()
        return types.ListResourceTemplatesResult(
            resource_templates=[types.ResourceTemplate.model_validate(t, by_name=False) for t in items])

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
                                 get_tool_input_schema=lambda name: host.specs[name].input_schema
                                 if name in host.specs else None)
    server.middleware = []  # no per-message OTel span on the hot path; the host keeps its own telemetry
    return server


async def serve_stdio(host: ToolHost) -> None:
    from .transport import host_stdio

    server = build_server(host, client=stdio_client())
    async with host_stdio() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def http_token_digest(state_dir: Path) -> str:
    """The SHA-256 of the operator's bearer token: of $DOME_MCP_TOKEN, else the one <ops>/mcp/http.token
    keeps (a new token is made and shown once on stderr; the file never holds the token itself)."""
    from .identity import token_digest

    env = os.environ.get("DOME_MCP_TOKEN")
    if env:
        return token_digest(env)
    from .paths import operator_token_digest  # 0600 in a 0700 folder; refused when found unsafe

    return operator_token_digest(state_dir, announce=lambda line: print(line, file=sys.stderr, flush=True))


LOOPBACK = ("127.0.0.1", "::1", "localhost")


def build_http_app(host: ToolHost, token_digest: str | None, *, bind_host: str = "127.0.0.1",
                   stateless: bool = False, port: int | None = None,
                   sessions_per_client: int | None = None) -> Any:
    """The ASGI app; `token_digest=None` (no bearer auth) only for a loopback bind.

    `token_digest`: the SHA-256 of the operator's token (only the hash is held); named clients'
    tokens come from OPS_ROOT/mcp/clients.json.
    """
    server = build_server(host)
    security = None
    if bind_host in LOOPBACK and port is not None:  # exact names and port: the SDK's own check agrees
        from mcp.server.transport_security import TransportSecuritySettings

        names = ("127.0.0.1", "localhost", "[::1]")
        security = TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                             allowed_hosts=[f"{n}:{port}" for n in names],
                                             allowed_origins=[f"http://{n}:{port}" for n in names])
    app = server.streamable_http_app(stateless_http=stateless, host=bind_host, json_response=False,
                                     transport_security=security)
    inner_lifespan = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[None]:
        async with host.running(), inner_lifespan(a):
            yield

    app.router.lifespan_context = lifespan
    if token_digest is None and bind_host not in LOOPBACK:
        raise ValueError(f"serving without a bearer token is allowed on loopback only, not {bind_host}")

    def sessions_of(name: str) -> int:
        # the SDK's session manager knows which sessions are open and who opened each
        manager = getattr(server, "_session_manager", None)
        live = getattr(manager, "_server_instances", {})
        owners = getattr(manager, "_session_owners", {})
        return sum(1 for sid in live if (owners.get(sid) or {}).get("client_id") == name)

    from coordinator.observe.mcp_door import wrap  # /metrics and per-call telemetry (docs/operations.md)

    app = wrap(app, host)  # inside the guard: /metrics answers only a bearer of a token
    extra = {"sessions_per_client": sessions_per_client} if sessions_per_client else {}
    return HttpGuard(app, operator_digest=token_digest,
                     clients=ClientBook(host.state_dir) if token_digest is not None else None,
                     loopback=bind_host in LOOPBACK, port=port, sessions_of=None if stateless else sessions_of,
                     **extra)


def serve_http(host: ToolHost, bind: str, *, stateless: bool = False, auth: bool = True) -> None:
    import uvicorn

    addr, _, port = bind.rpartition(":")
    addr = addr.strip("[]") or "127.0.0.1"
    if not auth and addr not in LOOPBACK:
        raise ValueError(f"--no-auth is allowed on a loopback address only, not {addr}")
    digest = http_token_digest(host.state_dir) if auth else None
    app = build_http_app(host, digest, bind_host=addr, stateless=stateless, port=int(port))
    uvicorn.run(app, host=addr, port=int(port), log_level="warning", lifespan="on",
                http=header_timeout_protocol())


def run_stdio(host: ToolHost) -> None:
    anyio.run(serve_stdio, host)
