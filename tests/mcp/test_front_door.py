"""Front-door defects: HTTP disconnect cancels, sessions restore whole or not at all, unknown tools,
artifact placement. Real SDK clients, a real `dome mcp --http` process, real KLayout."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
import mcp_types as types
from mcp_types import INVALID_PARAMS

from tests.conftest import REPO_ROOT

from .conftest import MODES, connect, http_host, job_files, make_host, two_bars_gds, work

pytestmark = pytest.mark.anyio
TOKEN = "front-door-token-0123456789"

# A client in its own process, so the test can SIGKILL it mid-call (no goodbye on the wire).
CLIENT = r"""
import sys, json, anyio, httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
url, token, tool, args, mode = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), sys.argv[5]
async def main():
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=600) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode, cache=None) as c:
            print("calling", flush=True)
            await c.call_tool(tool, args, read_timeout_seconds=600)
anyio.run(main)
"""


@pytest.fixture(name="http_host")
def _http_host(tmp_path):
    with http_host(tmp_path, TOKEN) as url:
        yield url


def _cpu_ticks(pid: int) -> int:
    """utime + stime of the worker and every process under it (it runs inside bubblewrap)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return total


async def _health(url: str) -> dict:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy", cache=None) as c:
            return (await c.call_tool("health", {})).structured_content


async def _kill_client_mid_call(url: str, tool: str, args: dict, started, tmp_path: Path,
                                mode: str = "legacy") -> float:
    """Start a client process calling `tool`, wait for `started()`, SIGKILL it; return the kill time."""
    client = subprocess.Popen([sys.executable, "-c", CLIENT, url, TOKEN, tool, json.dumps(args), mode], cwd=REPO_ROOT,
                              env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL)
    try:
        with anyio.fail_after(300):
            while not started():
                assert client.poll() is None, "the client died on its own"
                await anyio.sleep(0.05)
        t_kill = time.monotonic()
        client.send_signal(signal.SIGKILL)
        client.wait(timeout=10)
        return t_kill
    finally:
        if client.poll() is None:
            client.kill()
            client.wait(timeout=10)


async def _assert_cancelled_and_idle(url: str, tool: str, t_kill: float, tmp_path: Path) -> None:
    with anyio.fail_after(10):
        while not [j for j in job_files(tmp_path) if j["tool"] == tool and j["status"] == "cancelled"]:
            await anyio.sleep(0.05)
    assert time.monotonic() - t_kill < 2.0, "the job was not cancelled within 2 s of the disconnect"
    health = await _health(url)
    assert health["running_jobs"] == 0
    pid = health["worker_pid"]
    if pid is not None and Path(f"/proc/{pid}").exists():  # the same worker (it honoured the token): idle now
        before = _cpu_ticks(pid)
        await anyio.sleep(0.5)
        assert _cpu_ticks(pid) - before <= 2, "the worker kept computing after the disconnect"


@pytest.mark.parametrize("mode", MODES)
async def test_http_client_killed_mid_call_cancels_its_job(http_host, tmp_path, mode):
    hb = work(tmp_path) / "hb"
    t_kill = await _kill_client_mid_call(
        http_host, "test_slow", {"steps": 3000, "step_s": 0.02, "heartbeat": str(hb)},
        lambda: hb.exists() and hb.read_text().isdigit() and int(hb.read_text()) >= 5, tmp_path, mode)
    await _assert_cancelled_and_idle(http_host, "test_slow", t_kill, tmp_path)
    frozen = hb.read_text()
    await anyio.sleep(0.5)
    assert hb.read_text() == frozen and int(frozen) < 2000


@pytest.mark.slow
async def test_http_client_killed_mid_optimize_cancels_and_idles_the_worker(http_host, tmp_path, iccad13):
    layout = iccad13 / "layouts" / "M1_test1.glp"

    seen: list[float] = []

    def computing() -> bool:  # the job has been running for 3 s: the ILT loop is busy
        if not seen and any(j["tool"] == "optimize" and j["status"] == "running" for j in job_files(tmp_path)):
            seen.append(time.monotonic())
        return bool(seen) and time.monotonic() - seen[0] > 3.0

    t_kill = await _kill_client_mid_call(http_host, "optimize", {"layout": str(layout), "iterations": 400,
                                                                 "out": "mask.oas"}, computing,
                                         tmp_path)
    await _assert_cancelled_and_idle(http_host, "optimize", t_kill, tmp_path)


@pytest.mark.parametrize("path", ["inproc", pytest.param("stdio", marks=pytest.mark.slow)])
async def test_unknown_tool_is_a_json_rpc_error(path, tmp_path):
    async with connect(path, "legacy", tmp_path) as client:
        with pytest.raises(MCPError) as e:
            await client.call_tool("no_such_tool", {})
        assert e.value.error.code == INVALID_PARAMS and e.value.error.data["code"] == "UNKNOWN_TOOL"
        assert not (await client.call_tool("test_echo", {"value": 1})).is_error  # the session goes on


DECK = ("source($input, $top_cell)\nreport('w', $output)\n"
        "input(1, 0).width(2.5).output('narrow', 'width below 2.5 um')\n")


async def test_worker_restart_restores_the_session_whole(tmp_path):
    """Shape ids, DRC runs, the view and the artifact folder survive a worker crash; the id stays the same."""
    gds = _data(tmp_path) / "bars.gds"
    two_bars_gds(gds)
    deck = _data(tmp_path) / "width.drc"
    deck.write_text(DECK)
    host = make_host(tmp_path, KLAYOUT_MCP_ALLOWED_ROOTS=str(_data(tmp_path)))
    async with connect("inproc", "legacy", tmp_path, host=host) as client:
        opened = (await client.call_tool("open_layout", {"path": str(gds)})).structured_content
        sid = opened["session_id"]
        folder = Path(opened["artifact_root"])
        assert folder.is_relative_to(tmp_path / "mcp")  # under the ops root, not ./.artifacts
        q = (await client.call_tool("query_region", {"session_id": sid, "box": {"left": 0, "bottom": 0,
                                                                                "right": 20, "top": 10}})).structured_content
        ids = sorted(s["id"] for s in q["shapes"])
        drc = await client.call_tool("run_drc_script", {"session_id": sid, "script_path": str(deck)})
        assert not drc.is_error, drc.content[0].text
        run_id = drc.structured_content["run_id"]
        await client.call_tool("set_view", {"session_id": sid, "box": {"left": 0, "bottom": 0, "right": 5, "top": 5}})
        pid0 = (await client.call_tool("health", {})).structured_content["worker_pid"]
        await client.call_tool("test_crash_now", {})
        m = await client.call_tool("measure_geometry", {"session_id": sid, "mode": "edge_gap", "target_ids": ids[:2]})
        assert not m.is_error, m.content[0].text  # the old shape id still names its shape
        health = (await client.call_tool("health", {})).structured_content
        assert health["worker_pid"] != pid0 and health["restart_count"] >= 1
        mk = await client.call_tool("extract_markers", {"session_id": sid, "run_id": run_id})
        assert not mk.is_error, mk.content[0].text
        assert mk.structured_content["marker_count"] == drc.structured_content["marker_count"] >= 1
        r = (await client.call_tool("render_view", {"session_id": sid})).structured_content
        assert r["session_id"] == sid and Path(r["image"]["path"]).parent == folder / "renders"
        assert r["box_um"] == {"left": 0.0, "bottom": 0.0, "right": 5.0, "top": 5.0}  # the view came back too


async def test_expired_session_stays_dead_after_a_worker_restart(tmp_path):
    gds = _data(tmp_path) / "bars.gds"
    two_bars_gds(gds)
    host = make_host(tmp_path, KLAYOUT_MCP_ALLOWED_ROOTS=str(_data(tmp_path)), KLAYOUT_MCP_SESSION_TTL_SECONDS="1")
    async with connect("inproc", "legacy", tmp_path, host=host) as client:
        sid = (await client.call_tool("open_layout", {"path": str(gds)})).structured_content["session_id"]
        await anyio.sleep(1.3)  # idle past the TTL, then the worker dies before anyone swept it
        await client.call_tool("test_crash_now", {})
        for _ in range(2):
            res = await client.call_tool("list_layers", {"session_id": sid})
            assert res.is_error and res.structured_content["code"] == "SESSION_EXPIRED", res.content[0].text
        assert not (tmp_path / "mcp" / "klayout" / "sessions" / sid).exists()


async def test_session_that_cannot_be_restored_is_not_found_with_a_hint(tmp_path):
    gds = _data(tmp_path) / "bars.gds"
    two_bars_gds(gds)
    host = make_host(tmp_path, KLAYOUT_MCP_ALLOWED_ROOTS=str(_data(tmp_path)))
    async with connect("inproc", "legacy", tmp_path, host=host) as client:
        sid = (await client.call_tool("open_layout", {"path": str(gds)})).structured_content["session_id"]
        gds.write_bytes(gds.read_bytes() + b"\0" * 2048)  # the layout changes under the session
        await client.call_tool("test_crash_now", {})
        res = await client.call_tool("list_layers", {"session_id": sid})
        assert res.is_error and res.structured_content["code"] == "SESSION_NOT_FOUND"
        assert any("open_layout" in h for h in res.structured_content["hints"])
        again = await client.call_tool("list_layers", {"session_id": sid})  # gone for good, not half-alive
        assert again.structured_content["code"] == "SESSION_NOT_FOUND"


async def test_renders_come_back_as_images_and_every_artifact_is_a_resource(tmp_path):
    """A client on another machine sees the render (image content) and reads any artifact by URI."""
    import base64

    gds = _data(tmp_path) / "bars.gds"
    two_bars_gds(gds)
    host = make_host(tmp_path, KLAYOUT_MCP_ALLOWED_ROOTS=str(_data(tmp_path)))
    async with connect("inproc", "legacy", tmp_path, host=host) as client:
        sid = (await client.call_tool("open_layout", {"path": str(gds)})).structured_content["session_id"]
        res = await client.call_tool("render_view", {"session_id": sid, "image_size": {"width": 64, "height": 64}})
        assert not res.is_error, res.content[0].text
        images = [c for c in res.content if c.type == "image"]
        links = [c for c in res.content if c.type == "resource_link"]
        png = Path(res.structured_content["image"]["path"]).read_bytes()
        assert len(images) == 1 and base64.b64decode(images[0].data) == png and images[0].mime_type == "image/png"
        assert len(links) == 1 and links[0].uri.startswith("dome://artifacts/")
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        assert links[0].uri in listed and any(u.endswith("/session.json") for u in listed)
        blob = (await client.read_resource(links[0].uri)).contents[0]
        assert base64.b64decode(blob.blob) == png
        manifest = next(u for u in listed if u.endswith("/session.json"))
        text = (await client.read_resource(manifest)).contents[0]
        assert json.loads(text.text)["session_id"] == sid
        (tmp_path / "secret.txt").write_text("not an artifact")
        for bad in ("dome://artifacts/../secret.txt", "dome://artifacts/mcp/klayout/../../secret.txt",
                    "file:///etc/passwd", "dome://artifacts/mcp/telemetry.jsonl"):
            with pytest.raises(MCPError) as e:
                await client.read_resource(bad)
            assert e.value.error.code == -32002, bad


async def test_capabilities_offer_what_the_current_revision_offers_and_no_logging(tmp_path):
    """The 2026-07-28 revision deprecates logging (SEP-2577): the server does not offer it, in
    either era, and logging/setLevel is an unknown method; tools and resources are offered."""
    from coordinator.mcp.server import build_server

    server = build_server(make_host(tmp_path))
    for version in (None, "2026-07-28"):
        caps = server.get_capabilities(protocol_version=version)
        assert caps.logging is None and caps.tools is not None and caps.resources is not None, version
    async with Client(server, mode="legacy", cache=None) as client:
        assert client.server_capabilities.logging is None
        assert client.server_capabilities.tools is not None
        with pytest.raises(MCPError) as e:
            await client.session.send_request(types.SetLevelRequest(params=types.SetLevelRequestParams(level="info")),
                                               types.EmptyResult)
        assert e.value.error.code == -32601  # method not found


def test_no_auth_is_refused_off_loopback_and_the_fixture_is_off_by_default(tmp_path, monkeypatch):
    from coordinator.mcp.server import build_http_app

    monkeypatch.delenv("DOME_MCP_CONFORMANCE", raising=False)
    host = make_host(tmp_path)
    with pytest.raises(ValueError):
        build_http_app(host, None, bind_host="0.0.0.0")
    build_http_app(host, None, bind_host="127.0.0.1")  # a loopback test harness may go without a token
    assert not {"test_simple_text", "test_error_handling"} & {d["name"] for d in host.list_tools()}
    r = subprocess.run([sys.executable, "-m", "coordinator.cli.main", "mcp", "--http", "0.0.0.0:1", "--no-auth",
                        "--ops-root", str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert r.returncode == 2 and "loopback" in r.stderr


def test_tools_list_is_compact_and_every_request_field_is_described(tmp_path):
    from coordinator.mcp.catalog import default_specs
    from coordinator.mcp.dispatch import ToolHost

    host = ToolHost(ops_root=tmp_path, specs=default_specs(include_test=False))
    tools = host.list_tools()
    wire = lambda o: len(json.dumps(o, separators=(",", ":")))
    assert wire({"tools": tools}) < 60_000  # it was 61-66 KB, with 89 request fields undescribed
    specs = default_specs(include_test=False)
    # published output schemas (job-handle and error variants included) are smaller than the bare responses
    assert sum(wire(t["outputSchema"]) for t in tools) < sum(wire(s.response) for s in specs.values())
    missing = []

    def walk(tool, prefix, schema):
        for name, sub in (schema.get("properties") or {}).items():
            if not sub.get("description"):
                missing.append(f"{tool}:{prefix}{name}")
            walk(tool, f"{prefix}{name}.", sub)
            if isinstance(sub.get("items"), dict):
                walk(tool, f"{prefix}{name}[].", sub["items"])

    for t in tools:
        walk(t["name"], "", t["inputSchema"])
    assert missing == []
    ev = next(t for t in tools if t["name"] == "evaluate")
    caps = ev["_meta"]["dome/capabilities"]
    for path, entry in caps["engine_paths"].items():  # the whole matrix is still there, in prose too
        assert f"{path}={entry['detailed']}" in ev["description"]


def _data(tmp_path: Path) -> Path:
    """The folder the host may read: beside its ops root (tmp_path), never containing it."""
    d = tmp_path / "in"
    d.mkdir(exist_ok=True)
    return d
