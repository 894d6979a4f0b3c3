"""The HTTP door's guard: who is calling, from where, and how long they may take.

An ASGI middleware in front of the SDK's streamable HTTP app. For every request it

- matches Host (and Origin, when sent) EXACTLY against the bound names and port
  on a loopback bind (DNS rebinding; a prefix match let `127.0.0.1:18765.evil.com`
  through);
- names the client from its bearer token: the operator token, or a named client's
  token (`identity.ClientBook`, re-read when it changes, so a revoked token is
  refused on its next request); the client rides in the ASGI scope for the tool
  handlers, and as the SDK's authenticated user, so the SDK binds each MCP
  session to the client that opened it (another client's session id is 404);
- caps the MCP sessions one named client may hold open;
- reads a POST body within BODY_TIMEOUT_S and MAX_BODY_BYTES before the app
  sees it (a half-sent body does not hold a request open);
- sets an event when the client disconnects, which cancels the call it carries.

The header timeout lives in the protocol (`HeaderTimeoutH11`), below ASGI.
"""
from __future__ import annotations

import hmac
import json
import os
from typing import Any, Callable

import anyio

from .identity import OPERATOR, Client, ClientBook, token_digest

CLIENT_KEY = "dome.client"
DISCONNECT_KEY = "dome.http_disconnected"
HEADER_TIMEOUT_S = float(os.environ.get("DOME_MCP_HEADER_TIMEOUT_S", "10"))  # a request's line and headers
BODY_TIMEOUT_S = float(os.environ.get("DOME_MCP_BODY_TIMEOUT_S", "30"))  # and its body within this
MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_SESSIONS_PER_CLIENT = 8
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def host_ok(value: str | None, names: tuple[str, ...], port: int | None) -> bool:
    """Pure: a Host header is exactly NAME:PORT for a bound name (any port when `port` is None)."""
    if not value:
        return False
    name, sep, got = value.rpartition(":")
    if not sep or not got.isdigit() or (port is not None and int(got) != port):
        return False
    return name in names


def origin_ok(value: str | None, names: tuple[str, ...], port: int | None) -> bool:
    """Pure: no Origin (not a browser), or exactly http://NAME:PORT for a bound name."""
    if value is None:
        return True
    return value.startswith("http://") and host_ok(value[len("http://"):], names, port)


def _refuse(status: int, code: str, message: str, headers: list[tuple[bytes, bytes]] | None = None):
    body = json.dumps({"code": code, "message": message, "retry": "none"}).encode()

    async def send_it(send: Any) -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()), *(headers or [])]})
        await send({"type": "http.response.body", "body": body})
    return send_it


class HttpGuard:
    def __init__(self, app: Any, *, operator_digest: str | None, clients: ClientBook | None,
                 loopback: bool, port: int | None = None,
                 sessions_of: Callable[[str], int] | None = None,
                 sessions_per_client: int = DEFAULT_SESSIONS_PER_CLIENT) -> None:
        self.app = app
        # the operator token's SHA-256 (hex): the token itself is held nowhere, in memory or on disk
        self.operator_digest = operator_digest
        self.clients = clients
        self.loopback = loopback
        self.port = port
        self.sessions_of = sessions_of
        self.sessions_per_client = sessions_per_client

    def identify(self, headers: dict[bytes, bytes]) -> Client | None:
        if self.operator_digest is None:  # --no-auth on loopback: the local harness is the operator
            return Client(OPERATOR)
        auth = headers.get(b"authorization", b"")
        if auth[:7].lower() != b"bearer ":
            return None
        try:
            presented = auth[7:].strip().decode("ascii")
        except UnicodeDecodeError:
            return None
        if hmac.compare_digest(token_digest(presented), self.operator_digest):
            return Client(OPERATOR)
        if self.clients is None:
            return None
        try:
            return self.clients.lookup(presented)
        except (OSError, ValueError):
            return None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if self.loopback:
            host = headers.get(b"host", b"").decode("latin-1")
            origin = headers.get(b"origin")
            if not host_ok(host, LOOPBACK_NAMES, self.port):
                return await _refuse(421, "HOST_NOT_ALLOWED", "Host header is not this server")(send)
            if not origin_ok(origin.decode("latin-1") if origin is not None else None, LOOPBACK_NAMES, self.port):
                return await _refuse(403, "ORIGIN_NOT_ALLOWED", "Origin is not this server")(send)
        client = self.identify(headers)
        if client is None:
            return await _refuse(401, "UNAUTHORIZED", "missing, wrong or revoked bearer token",
                                 [(b"www-authenticate", b'Bearer realm="dome-mcp"')])(send)
        scope[CLIENT_KEY] = client
        scope["user"] = _sdk_user(client)
        # the cap is per named client; the operator is held only by the SDK's overall session limit
        new_session = scope.get("method") == "POST" and b"mcp-session-id" not in headers and not client.operator
        if new_session and self.sessions_of is not None and \
                self.sessions_of(client.name) >= self.sessions_per_client:
            return await _refuse(429, "SESSION_LIMIT", f"at most {self.sessions_per_client} open MCP sessions "
                                 "per client; close one (DELETE) first")(send)
        if scope.get("method") == "POST":
            body = await _read_body(receive)
            if body is None:
                return await _refuse(408, "BODY_TIMEOUT", f"the request body did not arrive within "
                                     f"{BODY_TIMEOUT_S:.0f} s or exceeded {MAX_BODY_BYTES} bytes")(send)
            receive = _replay(body, receive)
        disconnected = anyio.Event()
        scope[DISCONNECT_KEY] = disconnected

        async def watched_receive() -> Any:
            message = await receive()
            if message.get("type") == "http.disconnect":
                disconnected.set()
            return message

        await self.app(scope, watched_receive, send)


def _sdk_user(client: Client) -> Any:
    """The SDK's authenticated user for a client: the SDK binds a session to the user that opened it."""
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken

    return AuthenticatedUser(AccessToken(token="-", client_id=client.name, scopes=[client.scope or OPERATOR]))


async def _read_body(receive: Any) -> bytes | None:
    """The whole body within the deadline and size bound, or None."""
    chunks: list[bytes] = []
    size = 0
    with anyio.move_on_after(BODY_TIMEOUT_S):
        while True:
            message = await receive()
            if message.get("type") != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                return None
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)
    return None


def _replay(body: bytes, receive: Any) -> Any:
    """A receive that hands the app the body read already, then the real channel (disconnects)."""
    sent = False

    async def replay() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()
    return replay


def header_timeout_protocol() -> type:
    """uvicorn's h11 protocol, closing a connection whose request head is not complete in time."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutH11(H11Protocol):
        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm_header_timer()

        def _arm_header_timer(self) -> None:
            self._header_timer = self.loop.call_later(HEADER_TIMEOUT_S, self._header_timeout)

        def _header_timeout(self) -> None:
            # still waiting for a request's line and headers (not idle keep-alive: that has its own timer)
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing() and \
                    self.timeout_keep_alive_task is None:
                self.transport.close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._header_timer.cancel()
            self._arm_header_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._header_timer.cancel()
            super().connection_lost(exc)

    return HeaderTimeoutH11
