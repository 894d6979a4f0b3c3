"""The gateway's direct path for a worker's tools/call (coordinator/gateway/direct.py) answers
with the bytes the MCP SDK sends, and leaves every other request to the SDK.

A real gateway (real SDK app, uvicorn on a Unix socket, real grants and ledger) answers each
request twice, once with the direct path on and once with it off (the `direct` flag), and the
status, headers (all but Date) and body bytes must be equal. The transport tests give the
gateway a deterministic call (the payload is what the arguments ask for), so one request can
be sent twice; the end-to-end tests at the bottom use the real handlers.
"""
from __future__ import annotations

import base64
import http.client
import json
import socket
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry import limits
from registry import toolprofile as tp
from tests.attacks import attack
from tests.runloop.conftest import open_attempt, start_gateway

RUN = "run-gw-direct"
VERSION = "2026-07-28"
LIMIT = 4096  # the body limit the transport tests' gateway is built with
META = {"io.modelcontextprotocol/protocolVersion": VERSION, "io.modelcontextprotocol/clientCapabilities": {}}


class _UDS(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("dome-gateway", timeout=30)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(self._path)
        self.sock = s


def send(gw, method: str, path: str, headers: list[tuple[str, str]], body: bytes,
         length: bool = True) -> tuple[int, list[tuple[str, str]], bytes]:
    """One raw HTTP request (headers exactly as given, duplicates kept): (status, headers but Date, body)."""
    conn = _UDS(str(gw.socket_path))
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for k, v in headers:
            conn.putheader(k, v)
        if length:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body if body else None)
        resp = conn.getresponse()
        return resp.status, [(k.lower(), v) for k, v in resp.getheaders() if k.lower() != "date"], resp.read()
    finally:
        conn.close()


def both(gw, *args, **kw) -> tuple[Any, Any, int]:
    """The answer with the direct path on, with it off, and how many requests the direct path took."""
    before = gw.app.direct
    gw.direct = True
    on = send(gw, *args, **kw)
    taken = gw.app.direct - before
    gw.direct = False
    try:
        off = send(gw, *args, **kw)
    finally:
        gw.direct = True
    assert gw.app.direct - before == taken  # off means off
    return on, off, taken


def worker_headers(name: str = "echo", token: str = "dgt1.test") -> list[tuple[str, str]]:
    """The headers worker_sdk.client sends with a tools/call."""
    return [("Host", "dome-gateway"), ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"), ("Authorization", f"Bearer {token}"),
            ("mcp-protocol-version", VERSION), ("mcp-method", "tools/call"), ("mcp-name", name),
            (tp.PROOF_HEADER, "proof-1")]


def call_body(args: dict | None = None, rid: Any = 1, name: str = "echo", **extra) -> bytes:
    params = {"name": name, "arguments": {"node_execution_id": "ne-1", **(args or {})}, "_meta": META}
    return json.dumps({"jsonrpc": "2.0", "method": "tools/call", "params": params, "id": rid, **extra}).encode()


@pytest.fixture
def echo_gateway(ledger_env, tmp_path: Path, monkeypatch):
    """A real gateway whose call answers deterministically: the payload the arguments name (or
    what it received), an error when they say so."""
    ledger, signer, keyring = ledger_env
    monkeypatch.setattr(limits, "MAX_REQUEST_BYTES", LIMIT)
    gw, writer, verifier, attempts = start_gateway(ledger, keyring, signer, tmp_path / "gw.sock", RUN, "a" * 40)

    def call(token: str, proof: str | None, name: str, args: dict) -> tuple[dict, bool]:
        if "payload" in args:
            return args["payload"], bool(args.get("fail"))
        return {"token": token, "proof": proof, "tool": name, "args": args}, False

    gw._call = call
    yield gw
    gw.stop()


def test_the_worker_request_is_answered_directly_with_the_sdk_bytes(echo_gateway):
    gw = echo_gateway
    on, off, taken = both(gw, "POST", "/mcp", worker_headers(), call_body({"x": [1, 2.5, None, "é"]}))
    assert taken == 1 and on == off and on[0] == 200
    assert dict(on[1])["content-type"] == "application/json" and "mcp-session-id" not in dict(on[1])
    result = json.loads(on[2])["result"]
    assert result["structuredContent"]["proof"] == "proof-1" and result["isError"] is False
    on, off, taken = both(gw, "POST", "/mcp", worker_headers(), call_body({"payload": {"code": "X"}, "fail": True}))
    assert taken == 1 and on == off and json.loads(on[2])["result"]["isError"] is True
    calls = gw.calls
    both(gw, "POST", "/mcp", worker_headers(), call_body())
    assert gw.calls == calls + 2  # a direct call is counted as the SDK's is


def _without(headers, name):
    return [(k, v) for k, v in headers if k.lower() != name.lower()]


def _with(headers, name, value):
    return _without(headers, name) + [(name, value)]


H = worker_headers()
MATRIX: dict[str, tuple] = {
    # refused or answered by the SDK: the direct path must not take these
    "wrong host (DNS rebinding)": ("POST", "/mcp", _with(H, "Host", "evil.example"), call_body()),
    "host with a port": ("POST", "/mcp", _with(H, "Host", "dome-gateway:80"), call_body()),
    "foreign origin": ("POST", "/mcp", H + [("Origin", "http://evil.example")], call_body()),
    "empty origin": ("POST", "/mcp", H + [("Origin", "")], call_body()),
    "two hosts": ("POST", "/mcp", H + [("Host", "evil.example")], call_body()),
    "no content type": ("POST", "/mcp", _without(H, "Content-Type"), call_body()),
    "text content type": ("POST", "/mcp", _with(H, "Content-Type", "text/plain"), call_body()),
    "json with charset": ("POST", "/mcp", _with(H, "Content-Type", "Application/JSON; charset=utf-8"), call_body()),
    "accept html": ("POST", "/mcp", _with(H, "Accept", "text/html"), call_body()),
    "accept sse only": ("POST", "/mcp", _with(H, "Accept", "text/event-stream"), call_body()),
    "accept anything": ("POST", "/mcp", _with(H, "Accept", "*/*"), call_body()),
    "no accept": ("POST", "/mcp", _without(H, "Accept"), call_body()),
    "no version header (legacy)": ("POST", "/mcp", _without(H, "mcp-protocol-version"), call_body()),
    "handshake version": ("POST", "/mcp", _with(H, "mcp-protocol-version", "2025-06-18"), call_body()),
    "unknown version": ("POST", "/mcp", _with(H, "mcp-protocol-version", "2099-01-01"), call_body()),
    "two versions": ("POST", "/mcp", H + [("mcp-protocol-version", VERSION)], call_body()),
    "method header mismatch": ("POST", "/mcp", _with(H, "mcp-method", "tools/list"), call_body()),
    "no method header": ("POST", "/mcp", _without(H, "mcp-method"), call_body()),
    "name header mismatch": ("POST", "/mcp", _with(H, "mcp-name", "other"), call_body()),
    "no name header": ("POST", "/mcp", _without(H, "mcp-name"), call_body()),
    "param header": ("POST", "/mcp", H + [("Mcp-Param-x", "1")], call_body()),
    "bad json": ("POST", "/mcp", H, b"{not json"),
    "batch": ("POST", "/mcp", H, b"[" + call_body() + b"]"),
    "notification": ("POST", "/mcp", _with(H, "mcp-method", "notifications/cancelled"),
                     json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                 "params": {"requestId": 1, "_meta": META}}).encode()),
    "tools/list": ("POST", "/mcp", _without(_with(H, "mcp-method", "tools/list"), "mcp-name"),
                   json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": META}}).encode()),
    "tools/list without a grant": ("POST", "/mcp", _without(_without(_with(H, "mcp-method", "tools/list"), "mcp-name"),
                                                            "Authorization"),
                                   json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list",
                                               "params": {"_meta": META}}).encode()),
    "ping": ("POST", "/mcp", _without(_with(H, "mcp-method", "ping"), "mcp-name"),
             json.dumps({"jsonrpc": "2.0", "id": 4, "method": "ping", "params": {"_meta": META}}).encode()),
    "float id": ("POST", "/mcp", H, call_body(rid=1.0)),
    "bool id": ("POST", "/mcp", H, call_body(rid=True)),
    "null id": ("POST", "/mcp", H, call_body(rid=None)),
    "extra envelope key": ("POST", "/mcp", H, call_body(extra_key=1)),
    "wrong jsonrpc": ("POST", "/mcp", H, call_body().replace(b'"2.0"', b'"1.0"')),
    "no meta": ("POST", "/mcp", H, json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                               "params": {"name": "echo", "arguments": {}}}).encode()),
    "meta without capabilities": ("POST", "/mcp", H, json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "_meta": {"io.modelcontextprotocol/protocolVersion": VERSION}}}).encode()),
    "meta version mismatch": ("POST", "/mcp", H, call_body().replace(VERSION.encode(), b"2025-06-18")),
    "capabilities not an object": ("POST", "/mcp", H, call_body().replace(b'Capabilities": {}', b'Capabilities": 7')),
    "arguments not an object": ("POST", "/mcp", H, json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": [1], "_meta": META}}).encode()),
    "name not a string": ("POST", "/mcp", _with(H, "mcp-name", "7"), json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": 7, "_meta": META}}).encode()),
    "oversize body": ("POST", "/mcp", H, call_body({"pad": "x" * LIMIT})),
    "get": ("GET", "/mcp", H, b""),
    "delete": ("DELETE", "/mcp", H, b""),
    "put": ("PUT", "/mcp", H, call_body()),
    "trailing slash": ("POST", "/mcp/", H, call_body()),
    "other path": ("POST", "/other", H, call_body()),
    "query string": ("POST", "/mcp?x=1", H, call_body()),
    # answered by the direct path, with the SDK's bytes
    "base64 name header": ("POST", "/mcp", _with(H, "mcp-name", "=?base64?" + base64.b64encode(b"echo").decode()
                                                  + "?="), call_body()),
    "string id": ("POST", "/mcp", H, call_body(rid="abc\u00e9")),
    "big id": ("POST", "/mcp", H, call_body(rid=2 ** 70)),
    "no arguments": ("POST", "/mcp", H, json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                                     "params": {"name": "echo", "_meta": META}}).encode()),
    "client info": ("POST", "/mcp", H, call_body().replace(
        b'"io.modelcontextprotocol/clientCapabilities"',
        b'"io.modelcontextprotocol/clientInfo": {"name": "w", "version": "1"}, '
        b'"io.modelcontextprotocol/clientCapabilities"')),
    "no grant": ("POST", "/mcp", _without(H, "Authorization"), call_body()),
    "no proof": ("POST", "/mcp", _without(H, tp.PROOF_HEADER), call_body()),
    "unknown tool": ("POST", "/mcp", _with(H, "mcp-name", "nope"), call_body(name="nope")),
    "carried calls": ("POST", "/mcp", H, call_body({"carried": [{"tool": "put_artifact", "arguments": {"a": 1},
                                                                 "proof": "p"}]})),
    "accept json only": ("POST", "/mcp", _with(H, "Accept", "application/json"), call_body()),
    "accept application wildcard": ("POST", "/mcp", _with(H, "Accept", "application/*;q=0.5"), call_body()),
}
DIRECT = {"base64 name header", "string id", "big id", "no arguments", "client info", "no grant", "no proof",
          "unknown tool", "carried calls", "accept json only", "accept application wildcard", "accept anything",
          "json with charset", "extra envelope key"}


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_same_answer_with_and_without_the_direct_path(echo_gateway, case):
    on, off, taken = both(echo_gateway, *MATRIX[case])
    assert on == off, case
    assert taken == (1 if case in DIRECT else 0), case


@attack("gateway-dns-rebinding")
def test_a_dns_rebinding_request_is_refused_as_before_and_runs_nothing(echo_gateway):
    """Adversarial: a page in a browser that resolves its own name to the gateway's address sends
    the worker's request with its own Host (or Origin). The direct path does not take it; the
    SDK refuses it as it did, and no call runs."""
    gw = echo_gateway
    calls = gw.calls
    for headers, status, text in ((_with(H, "Host", "attacker.example"), 421, b"Invalid Host header"),
                                  (H + [("Origin", "http://attacker.example")], 403, b"Invalid Origin header"),
                                  (_with(H, "Host", "127.0.0.1:8000"), 421, b"Invalid Host header")):
        on, off, taken = both(gw, "POST", "/mcp", headers, call_body())
        assert on == off and taken == 0
        assert on[0] == status and on[2] == text
    assert gw.calls == calls


# ------------------------------------------------------------------ generated requests
_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                     | st.text(max_size=8), lambda kids: st.lists(kids, max_size=3)
                     | st.dictionaries(st.text(max_size=6), kids, max_size=3), max_leaves=12)
_header_edits = st.lists(st.sampled_from([
    ("drop", "Host"), ("set", "Host", "evil"), ("add", "Origin", "http://x"), ("set", "Accept", "text/html"),
    ("set", "Accept", "*/*"), ("set", "Content-Type", "text/plain"), ("drop", "mcp-name"),
    ("set", "mcp-name", "other"), ("set", "mcp-method", "ping"), ("set", "mcp-protocol-version", "2025-11-25"),
    ("drop", "mcp-protocol-version"), ("add", "mcp-name", "echo"), ("drop", "Authorization"),
    ("set", "Authorization", "Basic abc"), ("drop", tp.PROOF_HEADER), ("add", "Mcp-Param-a", "b")]), max_size=3)


def _edit(headers, edits):
    for e in edits:
        if e[0] == "drop":
            headers = _without(headers, e[1])
        elif e[0] == "set":
            headers = _with(headers, e[1], e[2])
        else:
            headers = headers + [(e[1], e[2])]
    return headers


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=st.dictionaries(st.text(max_size=8), _json, max_size=4), fail=st.booleans(),
       rid=st.one_of(st.integers(), st.text(max_size=6), st.floats(allow_nan=False), st.none()),
       edits=_header_edits, body_edit=st.sampled_from(["none", "none", "truncate", "batch", "no id", "extra"]))
def test_generated_requests_get_the_same_answer(echo_gateway, payload, fail, rid, edits, body_edit):
    body = call_body({"payload": payload, "fail": fail}, rid=rid)
    if body_edit == "truncate":
        body = body[:-3]
    elif body_edit == "batch":
        body = b"[" + body + b"]"
    elif body_edit == "no id":
        body = json.dumps({k: v for k, v in json.loads(body).items() if k != "id"}).encode()
    elif body_edit == "extra":
        body = call_body({"payload": payload, "fail": fail}, rid=rid, params_extra=None)
    on, off, _ = both(echo_gateway, "POST", "/mcp", _edit(worker_headers(), edits), body)
    assert on == off


# ------------------------------------------------------------------ the result encoder against the SDK's
class _Colour(Enum):
    RED = "red"


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6)
    | st.sampled_from([_Colour.RED, "\ud800x", float("inf"), -0.0, 2 ** 80]),
    lambda kids: st.lists(kids, max_size=3) | st.lists(kids, max_size=2).map(tuple)
    | st.dictionaries(st.text(max_size=4) | st.integers(0, 3), kids, max_size=3), max_leaves=10)


@settings(max_examples=300, deadline=None)
@given(payload=st.dictionaries(st.text(max_size=5), _values, max_size=4), error=st.booleans(),
       rid=st.integers() | st.text(max_size=4))
def test_fast_result_encoding_is_the_sdks(payload, error, rid):
    from mcp.server.lowlevel.server import Server

    from coordinator.gateway.direct import ResultEncoder
    enc = ResultEncoder(Server("dome-worker-gateway", version="1"))
    assert enc.encode(rid, VERSION, payload, error) == enc.sdk_encode(rid, VERSION, payload, error)


def test_a_result_json_cannot_encode_is_the_sdks_internal_error():
    from mcp.server.lowlevel.server import Server

    from coordinator.gateway.direct import ResultEncoder
    enc = ResultEncoder(Server("dome-worker-gateway", version="1"))
    status, body = enc.encode(5, VERSION, {"a": {1, 2}}, False)
    assert (status, json.loads(body)) == (200, {"jsonrpc": "2.0", "id": 5,
                                                "error": {"code": -32603, "message": "Internal server error"}})


# ------------------------------------------------------------------ the real handlers, end to end
def _shape(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _shape(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_shape(x) for x in v]
    return type(v).__name__


@pytest.mark.parametrize("direct", [True, False])
def test_a_task_request_through_the_real_handlers(ledger_env, tmp_path: Path, direct):
    """The worker's one request per task (complete_task carrying put_artifact and submit_patch)
    and a refused one, through the real grant checks and ledger, with the path on and off."""
    from tests.conftest import git
    ledger, signer, keyring = ledger_env
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "README").write_text("r\n")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    started = start_gateway(ledger, keyring, signer, tmp_path / "gw.sock", RUN, git(repo, "rev-parse", "HEAD").strip())
    gw = started[0]
    gw.direct = direct
    try:
        c, proposal, diff, _ = open_attempt(started, signer, repo, RUN, "ne-d1")
        c.put_artifact_carried(diff, "text/x-diff", "patch.diff")
        pid = c.submit_patch_carried(proposal)
        done = c.complete_task("succeeded", summary={}, proposal_id=pid)
        assert [x["tool"] for x in done["carried"]] == ["put_artifact", "submit_patch"]
        assert gw.app.direct == (1 if direct else 0)
        bad = send(gw, "POST", "/mcp", worker_headers("report_progress", token=c.token),
                   call_body({"fraction": 0.5}, name="report_progress"))
        answer = json.loads(bad[2])["result"]
        assert bad[0] == 200 and answer["isError"] is True
        assert answer["structuredContent"]["code"] in ("GRANT_REPLAYED", "INVALID_REQUEST", "ATTEMPT_NOT_LIVE")
        assert _shape(json.loads(bad[2])) == {"jsonrpc": "str", "id": "int", "result": {
            "content": [{"text": "str", "type": "str"}], "isError": "bool", "resultType": "str",
            "structuredContent": _shape(answer["structuredContent"]),
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "str", "version": "str"}}}}
    finally:
        gw.stop()


def test_an_idle_gateway_wakes_once_a_second_and_stops_at_once(echo_gateway):
    """The server loop refreshes the Date header once a second and otherwise sleeps (uvicorn's
    own loop wakes ten times a second); stop() does not wait for the next wake."""
    import time
    from email.utils import parsedate_to_datetime
    gw = echo_gateway
    server = gw._server
    ticks = []
    tick = server.on_tick

    async def counted(counter):
        ticks.append(counter)
        return await tick(counter)
    server.on_tick = counted
    time.sleep(2.5)
    assert 1 <= len(ticks) <= 4, ticks
    conn = _UDS(str(gw.socket_path))
    conn.request("GET", "/mcp", headers=dict(worker_headers()))
    date = conn.getresponse().getheader("date")
    conn.close()
    assert abs(parsedate_to_datetime(date).timestamp() - time.time()) < 3
    t0 = time.monotonic()
    gw.stop()
    assert time.monotonic() - t0 < 0.9 and not gw._thread.is_alive()
