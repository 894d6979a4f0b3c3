"""The gateway's direct path: a worker's tools/call answered without the HTTP/MCP stack.

Almost every request a run's gateway serves is the same: one POST of one
JSON-RPC `tools/call` in the sessionless MCP revision (protocol version and
client capabilities in `params._meta`, the `Mcp-Method`/`Mcp-Name` routing
headers, no session). `DirectFront` is an ASGI app placed before the MCP
SDK's own app. A request it recognises as exactly that, and as one the SDK
would serve, is answered here: the call runs in the gateway's handler thread
pool and the answer is the bytes the SDK would have sent (same JSON-RPC
envelope, same CallToolResult fields in the same order, same status and
headers). Everything else goes to the SDK app untouched (a consumed body is
replayed), so every refusal (wrong Host or Origin, bad Content-Type or
Accept, oversized or malformed bodies, unknown versions, mismatched routing
headers, invalid params) is still the SDK's own, and so are tools/list,
notifications, batches, GET and DELETE.

What "a request the SDK would serve" means is decided with the SDK's own
predicates where they are public (the Accept parser, the JSON-RPC request
model, the per-version params surface, the call's params model, the header
value decoder) and conservatively elsewhere: a header that appears twice, an
Origin header, an `Mcp-Param-*` header, a query string or a body over the
limit send the request to the SDK. A result that is not plain JSON (a tuple,
an enum, a non-finite float, a string the SDK might encode differently) is
shaped by the SDK's own serializer instead of the fast one.
"""
from __future__ import annotations

import json
import logging
import math
from typing import Any, Awaitable, Callable, Iterable, Mapping

import mcp_types as types
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY, SERVER_INFO_META_KEY
from mcp_types import methods as sdk_methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .handoff import HandlerPool

log = logging.getLogger("dome.gateway")

MCP_PATH = "/mcp"
CALL = "tools/call"
JSON_TYPE = b"application/json"

# Headers the direct path reads; any of them twice, and the request goes to the SDK.
_READ = frozenset({b"host", b"origin", b"content-type", b"content-length", b"accept", b"authorization",
                   b"mcp-protocol-version", b"mcp-method", b"mcp-name"})
_PARAM_PREFIX = b"mcp-param-"

Answer = Callable[[str, "str | None", str, dict[str, Any]], "tuple[dict[str, Any], bool]"]
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def read_headers(raw: list[tuple[bytes, bytes]], proof_header: bytes) -> dict[bytes, bytes] | None:
    """The headers the direct path reads (lower-case names), or None when the request is not its own:
    a header it reads appears twice, or an `Mcp-Param-*` header is present."""
    got: dict[bytes, bytes] = {}
    for name, value in raw:
        if name in _READ or name == proof_header:
            if name in got:
                return None
            got[name] = value
        elif name.startswith(_PARAM_PREFIX):
            return None
    return got


def headers_pass(h: Mapping[bytes, bytes], *, host: bytes, max_bytes: int) -> bool:
    """Whether the SDK's transport checks pass for these headers on a tools/call POST (JSON response
    mode): Content-Type, Host, no Origin, an Accept that takes JSON, a modern protocol version,
    the routing headers present, a declared length within the limit."""
    from mcp.server.streamable_http import check_accept_headers
    ctype = h.get(b"content-type")
    if ctype is None or not ctype.decode("latin-1").lower().startswith("application/json"):
        return False
    if h.get(b"host") != host or b"origin" in h:
        return False
    if h.get(b"mcp-method") != CALL.encode() or b"mcp-name" not in h:
        return False
    if h.get(b"mcp-protocol-version", b"").decode("latin-1") not in MODERN_PROTOCOL_VERSIONS:
        return False
    length = h.get(b"content-length")
    if length is not None and not (length.isdigit() and int(length) <= max_bytes):
        return False
    accept = h.get(b"accept", b"").decode("latin-1")
    return check_accept_headers(_AcceptOnly(accept))[0]


class _AcceptOnly:
    """What the SDK's Accept parser reads of a request."""

    def __init__(self, accept: str) -> None:
        self.headers = {"accept": accept}


def parse_call(body: bytes, h: Mapping[bytes, bytes], params_type: Any) -> tuple[Any, Any] | None:
    """(JSON-RPC id, the call's typed params) when the body is one tools/call the SDK would dispatch
    with these headers; None for anything else (the SDK answers it)."""
    from mcp.shared.inbound import decode_header_value
    from pydantic import ValidationError
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if type(decoded) is not dict or "id" not in decoded or decoded.get("method") != CALL:
        return None
    try:
        req = types.JSONRPCRequest.model_validate(decoded)
    except ValidationError:
        return None
    params = req.params
    meta = params.get("_meta") if isinstance(params, dict) else None
    if type(meta) is not dict or CLIENT_CAPABILITIES_META_KEY not in meta:
        return None
    version = meta.get(PROTOCOL_VERSION_META_KEY)
    if type(version) is not str or version != h[b"mcp-protocol-version"].decode("latin-1"):
        return None
    name = params.get("name")
    if type(name) is not str or decode_header_value(h[b"mcp-name"].decode("latin-1")) != name:
        return None
    try:
        sdk_methods.validate_client_request(CALL, version, params)
        typed = params_type.model_validate(params, by_name=False)
    except (ValidationError, KeyError, ValueError):
        return None
    return req.id, typed


def _plain(value: Any, depth: int = 0) -> bool:
    """Whether `value` is JSON the SDK's serializer would hand back as it is (exact types only)."""
    t = type(value)
    if t is str:
        return value.isascii() or _utf8(value)
    if t is int or t is bool or value is None:
        return True
    if t is float:
        return math.isfinite(value)
    if depth > 64:
        return False
    if t is dict:
        return all(type(k) is str and (k.isascii() or _utf8(k)) and _plain(v, depth + 1) for k, v in value.items())
    if t is list:
        return all(_plain(v, depth + 1) for v in value)
    return False


def _utf8(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class ResultEncoder:
    """The HTTP answer (status, body) the SDK gives a tools/call whose handler returned
    `CallToolResult(content=[text], structured_content=payload, is_error=error)`."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.stamp = server.server_info_stamp  # the SDK's serverInfo `_meta` stamp on 2026-era results

    def encode(self, rpc_id: Any, version: str, payload: Any, error: bool) -> tuple[int, bytes]:
        try:
            text = json.dumps(payload, sort_keys=True)
        except Exception as exc:  # noqa: BLE001 - the SDK answers a raising handler so
            return self._failed(rpc_id, exc)
        if version not in MODERN_PROTOCOL_VERSIONS or type(payload) is not dict or not _plain(payload):
            return self._sdk(rpc_id, version, text, payload, error)
        body = {"jsonrpc": "2.0", "id": rpc_id,
                "result": {"content": [{"text": text, "type": "text"}], "isError": error, "resultType": "complete",
                           "structuredContent": payload, "_meta": {SERVER_INFO_META_KEY: self.stamp}}}
        return 200, json.dumps(body, separators=(",", ":")).encode()

    def sdk_encode(self, rpc_id: Any, version: str, payload: Any, error: bool) -> tuple[int, bytes]:
        """The same answer shaped by the SDK's own serializer (the reference the fast one is held to)."""
        try:
            text = json.dumps(payload, sort_keys=True)
        except Exception as exc:  # noqa: BLE001
            return self._failed(rpc_id, exc)
        return self._sdk(rpc_id, version, text, payload, error)

    def _sdk(self, rpc_id: Any, version: str, text: str, payload: Any, error: bool) -> tuple[int, bytes]:
        from mcp.server.connection import Connection
        from mcp.server.runner import ServerRunner
        try:
            result = types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                          structured_content=payload, is_error=error)
            runner = ServerRunner(self.server, Connection.from_envelope(version, None, None), None)
            shaped = runner._serialize(CALL, version, result)
        except Exception as exc:  # noqa: BLE001
            return self._failed(rpc_id, exc)
        return 200, _dumps(types.JSONRPCResponse(jsonrpc="2.0", id=rpc_id, result=shaped))

    @staticmethod
    def _failed(rpc_id: Any, exc: Exception) -> tuple[int, bytes]:
        from mcp.server.runner import modern_error_data
        from mcp.shared.inbound import ERROR_CODE_HTTP_STATUS
        error = modern_error_data(exc)
        return ERROR_CODE_HTTP_STATUS.get(error.code, 200), _dumps(
            types.JSONRPCError(jsonrpc="2.0", id=rpc_id, error=error))


def _dumps(msg: Any) -> bytes:
    return json.dumps(msg.model_dump(mode="json", by_alias=True, exclude_none=True), separators=(",", ":")).encode()


class DirectFront:
    """ASGI: a worker's tools/call answered directly (see the module docstring); the rest to `sdk_app`.

    `answer(authorization, proof, name, arguments) -> (payload, is_error)` is the gateway's call,
    run in `pool`'s threads; `enabled()` is read per request (off: every request goes to the SDK)."""

    def __init__(self, sdk_app: Any, *, server: Any, answer: Answer, pool: HandlerPool,
                 enabled: Callable[[], bool], host: str, proof_header: str, max_bytes: int,
                 tool_schemas: Iterable[Mapping[str, Any]], on_call: Callable[[], None] = lambda: None) -> None:
        self.sdk_app = sdk_app
        self.answer = answer
        self.pool = pool
        self.enabled = enabled
        self.host = host.encode("latin-1")
        self.proof_header = proof_header.lower().encode("latin-1")
        self.max_bytes = max_bytes
        self.on_call = on_call
        self.encoder = ResultEncoder(server)
        self.params_type = server.get_request_handler(CALL).params_type
        self.direct = 0  # requests answered here
        # no SDK middleware to observe the request (the OpenTelemetry span), and no tool schema
        # declaring an Mcp-Param header (the direct path does not check those)
        self.usable = not server.middleware and not any("x-mcp-header" in json.dumps(s) for s in tool_schemas)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != MCP_PATH
                or scope.get("root_path", "") or scope.get("query_string") or not self.usable
                or not self.enabled()):
            return await self.sdk_app(scope, receive, send)
        h = read_headers(scope["headers"], self.proof_header)
        if h is None or not headers_pass(h, host=self.host, max_bytes=self.max_bytes):
            return await self.sdk_app(scope, receive, send)
        seen: list[dict[str, Any]] = []
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            seen.append(message)
            if message["type"] != "http.request":
                return await self.sdk_app(scope, _replay(seen, receive), send)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return await self.sdk_app(scope, _replay(seen, receive), send)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        try:
            parsed = parse_call(b"".join(chunks), h, self.params_type)
        except Exception:  # noqa: BLE001 - whatever the direct path cannot judge, the SDK does
            log.debug("direct path passed a request on to the SDK", exc_info=True)
            parsed = None
        if parsed is None:
            return await self.sdk_app(scope, _replay(seen, receive), send)
        rpc_id, params = parsed
        version = h[b"mcp-protocol-version"].decode("latin-1")
        authorization = h.get(b"authorization", b"").decode("latin-1")
        proof = h.get(self.proof_header, b"").decode("latin-1") or None
        name, args = params.name, dict(params.arguments or {})
        self.direct += 1
        self.on_call()

        def run() -> tuple[int, bytes]:
            payload, error = self.answer(authorization, proof, name, args)
            return self.encoder.encode(rpc_id, version, payload, error)

        status, body = await self.pool.run(run)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", str(len(body)).encode()), (b"content-type", JSON_TYPE)]})
        await send({"type": "http.response.body", "body": body})


def _replay(seen: list[dict[str, Any]], receive: Receive) -> Receive:
    """`receive` as if nothing had been read from it: what was read first, then the rest."""
    pending = list(seen)

    async def again() -> dict[str, Any]:
        if pending:
            return pending.pop(0)
        return await receive()
    return again
