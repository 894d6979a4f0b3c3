"""Named clients of the HTTP door, through the real MCP SDK client over `dome mcp --http`:
per-client bearer tokens (hashed, revocable), each client sees and touches only its own jobs,
KLayout sessions, MCP sessions and artifacts, and the door matches Host and Origin exactly,
times out half-sent requests and never shows a host path in an error."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.attacks import attack
from tests.conftest import REPO_ROOT

from .conftest import http_host, two_bars_gds

pytestmark = pytest.mark.anyio
OPERATOR = "operator-token-0123456789abcdef"
ACCEPT = "application/json, text/event-stream"
HEADER_S = 2.0  # the door's header timeout in these tests


def _token(ops, *args: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "coordinator.cli.main", "mcp", "token", *args, "--ops-root", str(ops),
                        "--json"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def door(tmp_path_factory):
    """One HTTP door for the module, with clients alice and bob (scope run) and carol (scope read)."""
    tmp = tmp_path_factory.mktemp("door")
    ops = tmp / "ops"
    tokens = {n: _token(ops, "create", "--name", n, "--allow", a)["token"]
              for n, a in (("alice", "run"), ("bob", "run"), ("carol", "read"))}
    layouts = tmp / "layouts"  # the read root: apart from the ops root, which a root may never hold
    layouts.mkdir()
    gds = layouts / "two_bars.gds"
    two_bars_gds(gds)
    with http_host(ops, OPERATOR, KLAYOUT_MCP_ALLOWED_ROOTS=str(layouts), DOME_MCP_HEADER_TIMEOUT_S=str(HEADER_S),
                   DOME_MCP_BODY_TIMEOUT_S=str(HEADER_S)) as url:
        yield {"url": url, "ops": ops, "tokens": tokens, "gds": gds}


@asynccontextmanager
async def _client(door, token: str):
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        async with Client(streamable_http_client(door["url"], http_client=http), mode="legacy", cache=None) as c:
            yield c


def test_tokens_are_stored_hashed_and_private(door):
    raw = (door["ops"] / "mcp" / "clients.json").read_text()
    assert all(t not in raw for t in door["tokens"].values())
    assert (door["ops"] / "mcp" / "clients.json").stat().st_mode & 0o077 == 0
    listed = {c["name"]: c for c in _token(door["ops"], "list")["clients"]}
    assert listed["alice"]["allow"] == "run" and listed["carol"]["allow"] == "read"


async def test_a_clients_scope_limits_its_tools_and_names_it_in_telemetry(door):
    async with _client(door, door["tokens"]["carol"]) as carol:
        names = {t.name for t in (await carol.list_tools()).tools}
        assert "health" in names and not {"run_submit", "cancel", "promote"} & names
        with pytest.raises(MCPError):
            await carol.call_tool("run_submit", {"work_queue": "/x.json", "idempotency_key": "carol-submit-1"})
    async with _client(door, door["tokens"]["alice"]) as alice:
        names = {t.name for t in (await alice.list_tools()).tools}
        assert "run_submit" in names and "promote" not in names
        with anyio.fail_after(20):
            while True:  # call lines are buffered up to telemetry.FLUSH_S: the next call writes them
                assert not (await alice.call_tool("health", {})).is_error
                path = door["ops"] / "mcp" / "telemetry.jsonl"
                lines = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
                calls = [x for x in lines if x.get("event") == "call" and x.get("tool") == "health"]
                if calls:
                    break
                await anyio.sleep(0.5)
    assert calls[-1]["client"] == "alice"


@attack("mcp-client-revoked")
async def test_a_revoked_token_is_refused_at_once(door):
    dave = _token(door["ops"], "create", "--name", "dave", "--allow", "read")["token"]
    async with _client(door, dave) as client:
        assert not (await client.call_tool("health", {})).is_error
        _token(door["ops"], "revoke", "--name", "dave")
        async with httpx2.AsyncClient(timeout=30) as http:
            r = await http.post(door["url"], json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                headers={"authorization": f"Bearer {dave}", "accept": ACCEPT})
        assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED"
        with pytest.raises(Exception):  # the open session's next request is refused too
            await client.call_tool("health", {})


@attack("mcp-client-ownership")
async def test_another_clients_job_and_klayout_session_do_not_exist_for_bob(door):
    async with _client(door, door["tokens"]["alice"]) as alice, _client(door, door["tokens"]["bob"]) as bob:
        job = (await alice.call_tool("test_slow", {"steps": 400, "step_s": 0.05, "wait": False})).structured_content
        sid = (await alice.call_tool("open_layout", {"path": str(door["gds"])})).structured_content["session_id"]
        for tool, args in (("poll", {"job_id": job["job_id"]}), ("cancel", {"job_id": job["job_id"]})):
            res = await bob.call_tool(tool, args)
            assert res.is_error and res.structured_content["code"] == "JOB_NOT_FOUND", (tool, res.structured_content)
        for tool in ("list_cells", "close_session"):
            res = await bob.call_tool(tool, {"session_id": sid})
            assert res.is_error and res.structured_content["code"] == "SESSION_NOT_FOUND", (tool, res.structured_content)
        # alice's work is untouched: her job still runs, her session still answers
        assert (await alice.call_tool("poll", {"job_id": job["job_id"]})).structured_content["status"] == "running"
        assert not (await alice.call_tool("list_cells", {"session_id": sid})).is_error
        # the operator sees every client's work
        async with _client(door, OPERATOR) as op:
            assert not (await op.call_tool("poll", {"job_id": job["job_id"]})).is_error
        assert (await alice.call_tool("cancel", {"job_id": job["job_id"]})).structured_content["cancelled"] is True


@attack("mcp-client-ownership")
async def test_bob_cannot_delete_or_use_alices_mcp_session(door):
    async with httpx2.AsyncClient(timeout=30) as http:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "t", "version": "1"}}}
        r = await http.post(door["url"], json=init, headers={"authorization": f"Bearer {door['tokens']['alice']}",
                                                              "accept": ACCEPT})
        sid = r.headers["mcp-session-id"]
        bob = {"authorization": f"Bearer {door['tokens']['bob']}", "accept": ACCEPT, "mcp-session-id": sid}
        assert (await http.delete(door["url"], headers=bob)).status_code == 404
        alice = {"authorization": f"Bearer {door['tokens']['alice']}", "accept": ACCEPT, "mcp-session-id": sid}
        ping = await http.post(door["url"], json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers=alice)
        assert ping.status_code == 200  # still alive after bob's try
        assert (await http.delete(door["url"], headers=alice)).status_code == 200


@attack("mcp-host-origin")
async def test_host_and_origin_must_match_exactly(door):
    port = urlsplit(door["url"]).port
    auth = {"authorization": f"Bearer {OPERATOR}", "accept": ACCEPT}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with httpx2.AsyncClient(timeout=30) as http:
        for host, origin in ((f"127.0.0.1:{port}.evil.com", None), (f"127.0.0.1:{port}", f"http://127.0.0.1:{port}.evil.com"),
                             (f"localhost:{port + 1}", None), (f"127.0.0.1:{port}", f"http://localhost:{port}@evil.com")):
            headers = {**auth, "host": host, **({"origin": origin} if origin else {})}
            r = await http.post(door["url"], json=body, headers=headers)
            assert r.status_code in (403, 421) and r.json()["code"] in ("HOST_NOT_ALLOWED", "ORIGIN_NOT_ALLOWED"), \
                (host, origin, r.status_code)


@attack("mcp-resource-uri")
async def test_a_long_or_nul_resource_uri_is_not_found_without_a_host_path(door):
    async with _client(door, OPERATOR) as op:
        for uri in ("dome://artifacts/mcp/artifacts/" + "a" * 300, "dome://artifacts/mcp/artifacts/x%00y",
                    "dome://artifacts/mcp/artifacts/a\x00b"):
            with pytest.raises(MCPError) as e:
                await op.read_resource(uri)
            assert e.value.error.code == -32002, uri
            shown = json.dumps(e.value.error.model_dump(mode="json"))
            assert str(door["ops"]) not in shown and "Traceback" not in shown and "/tmp" not in shown


@attack("mcp-client-ownership")
async def test_resources_list_shows_only_the_callers_artifacts(door):
    async with _client(door, door["tokens"]["alice"]) as alice, _client(door, door["tokens"]["bob"]) as bob:
        sid = (await alice.call_tool("open_layout", {"path": str(door["gds"])})).structured_content["session_id"]
        shot = await alice.call_tool("render_view", {"session_id": sid})
        links = [c.uri for c in shot.content if c.type == "resource_link"]
        assert links, shot.content
        mine = {str(r.uri) for r in (await alice.list_resources()).resources}
        theirs = {str(r.uri) for r in (await bob.list_resources()).resources}
        assert set(map(str, links)) <= mine and not mine & theirs
        with pytest.raises(MCPError) as e:
            await bob.read_resource(str(links[0]))
        assert e.value.error.code == -32002


@attack("mcp-client-ownership")
async def test_ownership_of_artifacts_and_jobs_survives_a_restart(tmp_path):
    """Alice's artifact and job are hers after the door restarts: she still lists and reads them;
    to bob they still do not exist."""
    ops = tmp_path / "ops"
    tokens = {n: _token(ops, "create", "--name", n, "--allow", "run")["token"] for n in ("alice", "bob")}
    layouts = tmp_path / "layouts"
    layouts.mkdir()
    two_bars_gds(layouts / "two_bars.gds")
    env = {"KLAYOUT_MCP_ALLOWED_ROOTS": str(layouts)}
    with http_host(ops, OPERATOR, **env) as url:
        door = {"url": url}
        async with _client(door, tokens["alice"]) as alice:
            sid = (await alice.call_tool("open_layout", {"path": str(layouts / "two_bars.gds")})
                   ).structured_content["session_id"]
            shot = await alice.call_tool("render_view", {"session_id": sid})
            links = [str(c.uri) for c in shot.content if c.type == "resource_link"]
            job = (await alice.call_tool("test_slow", {"steps": 1, "step_s": 0.0, "wait": False})).structured_content
            assert links and job["job_id"].startswith("job_")
    with http_host(ops, OPERATOR, **env) as url:  # a new process: nothing of the first is in memory
        door = {"url": url}
        async with _client(door, tokens["alice"]) as alice, _client(door, tokens["bob"]) as bob:
            assert set(links) <= {str(r.uri) for r in (await alice.list_resources()).resources}
            assert (await alice.read_resource(links[0])).contents
            assert not (await alice.call_tool("poll", {"job_id": job["job_id"]})).is_error
            assert not set(links) & {str(r.uri) for r in (await bob.list_resources()).resources}
            with pytest.raises(MCPError) as e:
                await bob.read_resource(links[0])
            assert e.value.error.code == -32002
            for tool in ("poll", "cancel"):
                res = await bob.call_tool(tool, {"job_id": job["job_id"]})
                assert res.is_error and res.structured_content["code"] == "JOB_NOT_FOUND", res.structured_content
    assert (ops / "mcp" / "artifact_owners.jsonl").stat().st_mode & 0o777 == 0o600


def test_a_half_sent_request_is_closed(door, monkeypatch):
    """The header timeout closes a connection whose request head never finishes, and the body
    timeout answers 408 to one whose body never does (both HEADER_S here)."""
    port = urlsplit(door["url"]).port
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % port)  # never ends the head
        s.settimeout(HEADER_S + 20)
        t0 = time.monotonic()
        assert s.recv(1024) == b""  # closed by the server
        assert time.monotonic() - t0 < HEADER_S + 10
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:  # a body that never ends
        s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthorization: Bearer %s\r\n"
                  b"Content-Type: application/json\r\nAccept: %s\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\""
                  % (port, OPERATOR.encode(), ACCEPT.encode()))
        s.settimeout(HEADER_S + 20)
        t0 = time.monotonic()
        answer = b""
        while b"BODY_TIMEOUT" not in answer and (chunk := s.recv(4096)):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 408") and b"BODY_TIMEOUT" in answer, answer[:200]
        assert time.monotonic() - t0 < HEADER_S + 10


async def test_a_named_client_holds_at_most_its_cap_of_mcp_sessions(door):
    from coordinator.mcp.httpguard import DEFAULT_SESSIONS_PER_CLIENT

    erin = _token(door["ops"], "create", "--name", "erin", "--allow", "read")["token"]
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    headers = {"authorization": f"Bearer {erin}", "accept": ACCEPT}
    async with httpx2.AsyncClient(timeout=30) as http:
        sids = []
        for _ in range(DEFAULT_SESSIONS_PER_CLIENT):
            r = await http.post(door["url"], json=init, headers=headers)
            assert r.status_code == 200, r.text
            sids.append(r.headers["mcp-session-id"])
        over = await http.post(door["url"], json=init, headers=headers)
        assert over.status_code == 429 and over.json()["code"] == "SESSION_LIMIT"
        # another client is not held by erin's sessions; erin gets one back by closing one
        r = await http.post(door["url"], json=init, headers={**headers, "authorization": f"Bearer {OPERATOR}"})
        assert r.status_code == 200
        assert (await http.delete(door["url"], headers={**headers, "mcp-session-id": sids[0]})).status_code == 200
        assert (await http.post(door["url"], json=init, headers=headers)).status_code == 200


def test_scopes_are_a_ladder_and_the_book_rereads_its_file(tmp_path):
    from coordinator.mcp.identity import ClientBook, ClientExists, ClientTokenError, scope_allows

    assert scope_allows("read", "health", "read") and not scope_allows("read", "cancel", "write")
    assert scope_allows("run", "run_submit", "admin") and not scope_allows("run", "promote", "admin")
    assert scope_allows("promote", "promote", "admin") and scope_allows(None, "promote", "admin")
    book = ClientBook(tmp_path)
    for bad in ("operator", "stdio:x", "../x", ""):
        with pytest.raises(ClientTokenError):
            book.create(bad, "read")
    with pytest.raises(ClientTokenError):
        book.create("ok", "admin")
    token = book.create("ok", "read")
    with pytest.raises(ClientExists):
        book.create("ok", "run")
    assert book.lookup(token).name == "ok" and book.lookup(token + "x") is None
    ClientBook(tmp_path).revoke("ok")  # another process's revoke: this book sees it at once
    assert book.lookup(token) is None
