"""Litho and KLayout tools through the MCP host: capabilities, byte identity, progress/cancel, session rebuild."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import anyio
import pytest

from tests.conftest import REPO_ROOT

from .conftest import connect, make_host, process_descendants, two_bars_gds, wait_until_dead

pytestmark = pytest.mark.anyio


def test_litho_capabilities_on_the_descriptor_are_the_engines(tmp_path):
    from worker_sdk.litho.capabilities import capabilities

    host = make_host(tmp_path / "ops")
    by_name = {d["name"]: d for d in host.list_tools()}
    for tool in ("evaluate", "optimize", "simulate"):
        assert by_name[tool]["_meta"]["dome/capabilities"] == capabilities()


def _klayout_host(tmp_path):
    """A host whose worker may read tmp_path/data, with a two-bar layout there: (host, layout path)."""
    (tmp_path / "data").mkdir()
    gds = tmp_path / "data" / "two_bars.gds"
    two_bars_gds(gds)
    return make_host(tmp_path, KLAYOUT_MCP_ALLOWED_ROOTS=str(tmp_path / "data"),
                     KLAYOUT_MCP_ARTIFACT_ROOT=str(tmp_path / "artifacts")), gds


async def test_klayout_session_survives_worker_crash(tmp_path):
    host, gds = _klayout_host(tmp_path)
    async with connect("inproc", "legacy", tmp_path, host=host) as client:
        opened = await client.call_tool("open_layout", {"path": f"file://{gds}"})
        assert not opened.is_error, opened.content[0].text
        sid = opened.structured_content["session_id"]
        assert any("path" in n for n in opened.meta["dome/normalized"])
        layers1 = (await client.call_tool("list_layers", {"session_id": sid})).structured_content
        q = await client.call_tool("query_region", {"session_id": sid, "box": {"left": 0, "bottom": 0, "right": 20, "top": 10}})
        assert q.structured_content["summary"]["shape_count"] == 2
        await client.call_tool("test_crash_now", {})  # the worker holding the KLayout session dies
        layers2 = await client.call_tool("list_layers", {"session_id": sid})
        assert not layers2.is_error, layers2.content[0].text
        assert layers2.structured_content["layers"] == layers1["layers"]
        assert layers2.structured_content["session_id"] == sid
        health = (await client.call_tool("health", {})).structured_content
        assert health["restart_count"] >= 1
        missing = await client.call_tool("list_layers", {"session_id": "ses_000000000000"})
        assert missing.is_error and missing.structured_content["code"] == "SESSION_NOT_FOUND"


@pytest.mark.slow
@pytest.mark.timeout(1200)
async def test_byte_identity_cli_inproc_subprocess(tmp_path, iccad13):
    layout = iccad13 / "layouts" / "M1_test1.glp"
    direct = subprocess.run([sys.executable, "-m", "coordinator.cli.main", "litho", "eval", "--layout", str(layout),
                             "--report-level", "detailed", "--json"], capture_output=True, cwd=REPO_ROOT,
                            env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}, timeout=600)
    assert direct.returncode == 0, direct.stderr.decode()[-2000:]
    cli = json.loads(direct.stdout)
    results, texts = {}, {}
    for path in ("inproc", "stdio"):
        async with connect(path, "legacy", tmp_path) as client:
            res = await client.call_tool("evaluate", {"layout": str(layout), "report_level": "detailed",
                                                      "render": "json"}, read_timeout_seconds=600)
            assert not res.is_error, res.content[0].text
            assert res.meta["dome/job_id"].startswith("job_")  # the job rides in _meta, not in the result
            results[path], texts[path] = res.structured_content, res.content[0].text
    canon = lambda o: json.dumps(o, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    assert canon(results["inproc"]) == canon(cli) == canon(results["stdio"])  # nothing added, nothing lost
    # render=json text is the engine's own serialization: the very bytes the CLI printed
    assert texts["inproc"].encode() == texts["stdio"].encode() == direct.stdout.strip()


@pytest.mark.slow
async def test_optimize_progress_then_cancel_stops_within_1s(tmp_path, iccad13):
    layout = iccad13 / "layouts" / "M1_test1.glp"
    seen = []
    got_progress = anyio.Event()

    async def on_progress(progress, total, message):
        seen.append(progress)
        got_progress.set()

    async with connect("inproc", "legacy", tmp_path) as client:
        gen0 = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: client.call_tool("optimize", {"layout": str(layout), "iterations": 400,
                                                               "out": "mask.oas"},
                                                   progress_callback=on_progress))
            with anyio.fail_after(300):
                await got_progress.wait()
            gen0 = (await client.call_tool("health", {})).structured_content["generation"]
            t0 = time.monotonic()
            tg.cancel_scope.cancel()
        from .conftest import job_files
        with anyio.fail_after(5):
            while not [j for j in job_files(tmp_path) if j["tool"] == "optimize" and j["status"] == "cancelled"]:
                await anyio.sleep(0.02)
        assert time.monotonic() - t0 < 1.5  # cancelled and confirmed stopped by the worker
        health = (await client.call_tool("health", {})).structured_content
        # the engine honoured the token (same worker), or the host killed it at the 1 s mark
        honoured = health["generation"] == gen0 and health["last_fault"] is None
        killed = (health["last_fault"] or {}).get("code") == "TOOL_TIMEOUT"
        assert honoured or killed, health
    assert all(b > a for a, b in zip(seen, seen[1:]))


@pytest.mark.slow
async def test_optimize_cancelled_by_client_disconnect(tmp_path, iccad13):
    """stdio: the client goes away mid-optimize; the engine honours the token (no kill), the job ends cancelled."""
    layout = iccad13 / "layouts" / "M1_test1.glp"
    got_progress = anyio.Event()

    async def on_progress(progress, total, message):
        got_progress.set()

    with anyio.fail_after(300):
        async with connect("stdio", "legacy", tmp_path) as client:
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: client.call_tool("optimize", {"layout": str(layout), "iterations": 400,
                                                                   "out": "mask.oas"},
                                                       progress_callback=on_progress))
                await got_progress.wait()
                tg.cancel_scope.cancel()
            # leaving the block closes the host's stdin: a disconnect
    from .conftest import job_files
    job = [j for j in job_files(tmp_path) if j["tool"] == "optimize"][0]
    assert job["status"] == "cancelled"
    # either the engine honoured the token within 1 s, or the host killed the worker at the 1 s mark
    # (a loaded CPU can make one ILT iteration longer than that); both stop the work
    events = [json.loads(x) for x in (tmp_path / "mcp" / "telemetry.jsonl").read_text().splitlines()]
    kills = [e for e in events if e["event"] == "fault" and "not honoured" in str(e.get("message"))]
    assert len(kills) <= 1


@pytest.mark.slow
async def test_evaluate_sends_progress(tmp_path, iccad13):
    layout = iccad13 / "layouts" / "M1_test1.glp"
    seen = []

    async def on_progress(progress, total, message):
        seen.append((progress, message))

    async with connect("inproc", "legacy", tmp_path) as client:
        res = await client.call_tool("evaluate", {"layout": str(layout)}, progress_callback=on_progress,
                                     read_timeout_seconds=600)
        assert not res.is_error, res.content[0].text
    values = [p for p, _ in seen]
    assert len(values) >= 3 and all(b > a for a, b in zip(values, values[1:])), seen
    assert any("simulating" in (m or "") for _, m in seen)


async def test_klayout_results_carry_the_standard_provenance_block(tmp_path):
    """Inside the result, not only in _meta: seed, engine versions, input and output hashes, revision."""
    from registry.canonical import digest_json
    from registry.provenance import STANDARD_KEYS

    host, gds = _klayout_host(tmp_path)
    async with connect("inproc", "legacy", tmp_path, host=host) as client:
        opened = await client.call_tool("open_layout", {"path": str(gds)})
        sid = opened.structured_content["session_id"]
        box = {"left": 0, "bottom": 0, "right": 20, "top": 10}
        for tool, args in (("open_layout", {"path": str(gds)}), ("list_layers", {"session_id": sid}),
                           ("query_region", {"session_id": sid, "box": box})):
            res = await client.call_tool(tool, args)
            assert not res.is_error, res.content[0].text
            sc = res.structured_content
            prov = sc["provenance"]
            assert set(STANDARD_KEYS) <= set(prov) and prov["tool"] == tool
            assert "klayout" in prov["engine_versions"] and prov["revision_id"] is None
            assert prov["outputs_hash"] == digest_json({k: v for k, v in sc.items() if k != "provenance"})
            assert res.meta["dome/provenance"]["outputs_hash"] == prov["outputs_hash"]


async def test_direct_lane_answers_as_the_mcp_path_does(tmp_path, monkeypatch):
    """The short KLayout reads take the worker's direct lane; results and errors are the MCP path's."""
    from coordinator.mcp import transport

    used = []
    real = transport.WorkerPipes.direct_call

    async def counting(self, tool, arguments):
        used.append(tool)
        return await real(self, tool, arguments)

    monkeypatch.setattr(transport.WorkerPipes, "direct_call", counting)
    box = {"left": 0, "bottom": 0, "right": 20, "top": 10}
    answers = {}
    for lane in ("1", "0"):
        monkeypatch.setenv("DOME_MCP_DIRECT", lane)
        root = tmp_path / f"lane{lane}"
        root.mkdir()
        host, gds = _klayout_host(root)
        async with connect("inproc", "legacy", root, host=host) as client:
            sid = (await client.call_tool("open_layout", {"path": str(gds)})).structured_content["session_id"]
            out = []
            for tool, args in (("list_layers", {"session_id": sid}), ("query_region", {"session_id": sid, "box": box}),
                               ("describe_cell", {"session_id": sid, "cell": "TOP"}),
                               ("query_region", {"session_id": "ses_000000000000", "box": box})):
                res = await client.call_tool(tool, args)
                sc = {k: v for k, v in res.structured_content.items() if k not in ("session_id", "provenance")}
                text = [x for x in res.content[0].text.replace(sid, "SID").splitlines()
                        if not x.startswith("provenance:")]  # its hashes cover the session id
                # shape ids are per session: compare everything else
                out.append(re.sub(r"shp_[0-9a-f]+", "shp_ID", json.dumps([res.is_error, sc, text])))
            answers[lane] = out
        if lane == "1":
            assert used == ["list_layers", "query_region", "describe_cell", "query_region"]
            used.clear()
    assert used == []  # DOME_MCP_DIRECT=0: every call went through MCP
    assert answers["1"] == answers["0"]
    assert json.loads(answers["1"][-1])[0] is True and json.loads(answers["1"][-1])[1]["code"] == "SESSION_NOT_FOUND"


async def test_a_worker_dying_under_a_direct_call_is_a_typed_fault_then_recovered(tmp_path):
    import os
    import signal

    host, gds = _klayout_host(tmp_path)
    async with connect("inproc", "legacy", tmp_path, host=host) as client:
        sid = (await client.call_tool("open_layout", {"path": str(gds)})).structured_content["session_id"]
        pid = host.supervisor.worker_pid
        tree = [pid] + process_descendants(pid)
        # the worker must die under the call, not before it is sent (a worker found dead while
        # idle is simply replaced) nor after it answered: stop it, send the call, kill it once
        # the call is in flight
        for p in tree:
            os.kill(p, signal.SIGSTOP)
        answer: dict = {}

        async def list_layers() -> None:
            answer["res"] = await client.call_tool("list_layers", {"session_id": sid})

        async with anyio.create_task_group() as tg:
            tg.start_soon(list_layers)
            with anyio.fail_after(10):
                while host.supervisor._current is None or host.supervisor._current.inflight == 0:
                    await anyio.sleep(0.005)
            os.kill(pid, signal.SIGKILL)
            wait_until_dead(tree)
        res = answer["res"]
        # Convergent: the host replays it on a new worker, the session rebuilt there
        assert not res.is_error, res.content[0].text
        assert host.supervisor.worker_pid != pid
        health = (await client.call_tool("health", {})).structured_content
        assert health["last_fault"]["category"] in ("process", "transport")
