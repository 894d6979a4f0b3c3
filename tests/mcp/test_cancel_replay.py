"""Cancellation (notification and disconnect) and crash + replay per contract."""
from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from .conftest import MODES, PATHS, connect, job_files, work

pytestmark = pytest.mark.anyio


def _last_beat(hb: Path) -> tuple[str, float]:
    return (hb.read_text() if hb.exists() else "", time.monotonic())


async def _wait_beats(hb: Path, n: int = 3, timeout: float = 20.0) -> None:
    with anyio.fail_after(timeout):
        while not hb.exists() or int(hb.read_text() or 0) < n:
            await anyio.sleep(0.02)


async def _assert_stops_within(hb: Path, t_cancel: float, limit: float = 1.0) -> None:
    """The loop's heartbeat stops advancing within `limit` seconds of the cancel."""
    await anyio.sleep(max(0.0, t_cancel + limit - time.monotonic()))
    frozen = hb.read_text()
    await anyio.sleep(0.5)
    assert hb.read_text() == frozen, "the worker loop kept running after cancellation"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", PATHS)
async def test_cancel_by_notification_stops_worker_within_1s(path, mode, tmp_path):
    hb = work(tmp_path) / "hb"
    async with connect(path, mode, tmp_path) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "test_slow", {"steps": 2000, "step_s": 0.02, "heartbeat": str(hb)})
            await _wait_beats(hb)
            t_cancel = time.monotonic()
            tg.cancel_scope.cancel()  # the SDK client sends notifications/cancelled
        await _assert_stops_within(hb, t_cancel)
        jobs = [j for j in job_files(tmp_path) if j["tool"] == "test_slow"]
        assert len(jobs) == 1
        with anyio.fail_after(5):
            while (st := (await client.call_tool("poll", {"job_id": jobs[0]["job_id"]})).structured_content)["status"] == "running":
                await anyio.sleep(0.05)
        assert st["status"] == "cancelled"
        health = (await client.call_tool("health", {})).structured_content
        assert health["lifecycle_state"] == "ready"


@pytest.mark.parametrize("mode", ["legacy", pytest.param("2026-07-28", marks=pytest.mark.slow)])
async def test_cancel_by_disconnect_stops_worker_within_1s(mode, tmp_path):
    hb = work(tmp_path) / "hb"
    with anyio.move_on_after(30):
        async with connect("stdio", mode, tmp_path) as client:
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.call_tool, "test_slow", {"steps": 2000, "step_s": 0.02, "heartbeat": str(hb)})
                await _wait_beats(hb)
                t_cancel = time.monotonic()
                tg.cancel_scope.cancel()
                raise_disconnect = True
            # leaving the client closes the host's stdin: a disconnect
    assert raise_disconnect
    await _assert_stops_within(hb, t_cancel)
    jobs = [j for j in job_files(tmp_path) if j["tool"] == "test_slow"]
    assert [j["status"] for j in jobs] == ["cancelled"]


async def test_cancel_tool_on_background_job(tmp_path):
    hb = work(tmp_path) / "hb"
    async with connect("inproc", "legacy", tmp_path) as client:
        res = await client.call_tool("test_slow", {"steps": 2000, "step_s": 0.02, "heartbeat": str(hb), "wait": False})
        job_id = res.structured_content["job_id"]
        await _wait_beats(hb)
        t0 = time.monotonic()
        res = await client.call_tool("cancel", {"job_id": job_id})
        assert res.structured_content["status"] == "cancelled" and res.structured_content["cancelled"] is True
        await _assert_stops_within(hb, t0)
        assert (await client.call_tool("poll", {"job_id": job_id})).structured_content["status"] == "cancelled"


@pytest.mark.parametrize("path", ["inproc", pytest.param("stdio", marks=pytest.mark.slow)])
async def test_crash_convergent_is_replayed(path, tmp_path):
    async with connect(path, "legacy", tmp_path) as client:
        await client.call_tool("test_echo", {"value": 1})
        h0 = (await client.call_tool("health", {})).structured_content
        res = await client.call_tool("test_crash_convergent", {"marker": str(work(tmp_path) / "m")})
        assert not res.is_error, res.content[0].text
        assert res.structured_content["survived"] is True
        h1 = (await client.call_tool("health", {})).structured_content
        assert h1["generation"] == h0["generation"] + 1 and h1["restart_count"] == h0["restart_count"] + 1
        assert h1["last_fault"]["category"] == "process"
        tel = (await client.call_tool("telemetry", {})).structured_content
        assert tel["methods"]["test_crash_convergent"]["retries"] == 1
        assert tel["last_restart_fault"]["tool"] == "test_crash_convergent"
    lines = (tmp_path / "mcp" / "telemetry.jsonl").read_text().splitlines()
    assert any('"event":"restart"' in x for x in lines)


async def test_crash_probe_required_probes_then_replays(tmp_path):
    async with connect("inproc", "legacy", tmp_path) as client:
        # crash before the effect: the probe finds no effect, so the host replays
        res = await client.call_tool("test_crash_probe", {"marker": str(work(tmp_path) / "m1"), "effect": str(work(tmp_path) / "e1")})
        assert not res.is_error and res.structured_content["committed"] is True
        assert "recovered_by_probe" not in res.structured_content
        # crash after the effect: the probe finds it, so the host does NOT run it again
        res = await client.call_tool("test_crash_probe", {"marker": str(work(tmp_path) / "m2"), "effect": str(work(tmp_path) / "e2"),
                                                          "commit_before_crash": True})
        assert not res.is_error and res.structured_content["recovered_by_probe"] is True


async def test_crash_never_replay_fails_typed(tmp_path):
    async with connect("inproc", "legacy", tmp_path) as client:
        res = await client.call_tool("test_crash_never", {"marker": str(work(tmp_path) / "m")})
        assert res.is_error
        err = res.structured_content
        assert err["category"] == "process" and err["details"]["replay"] == "NeverReplay"
        assert err["details"]["replayed"] is False and err["retry"] == "none"
        assert "Traceback" not in res.content[0].text and len(err["message"]) <= 200
        # the host is still serving, on a new worker
        assert not (await client.call_tool("test_echo", {"value": 2})).is_error


async def test_replay_exhaustion(tmp_path):
    async with connect("inproc", "legacy", tmp_path) as client:
        res = await client.call_tool("test_crash_now", {})
        assert res.is_error and res.structured_content["details"]["replay"] == "NeverReplay"


async def test_worker_session_rebuilt_after_restart_or_not_found(tmp_path):
    src = work(tmp_path) / "layout.bin"
    src.write_bytes(b"pinned input")
    async with connect("inproc", "legacy", tmp_path) as client:
        sid = (await client.call_tool("test_session_open", {"path": str(src)})).structured_content["session_id"]
        r1 = (await client.call_tool("test_session_read", {"session_id": sid})).structured_content
        await client.call_tool("test_crash_now", {})  # the worker holding the session dies
        r2 = await client.call_tool("test_session_read", {"session_id": sid})
        assert not r2.is_error, r2.content[0].text
        assert r2.structured_content["session_id"] == sid and r2.structured_content["sha256"] == r1["sha256"]
        # a new worker (its pid inside its own sandbox may repeat; the host counts the restart)
        assert (await client.call_tool("health", {})).structured_content["restart_count"] >= 1
        # the rebuilt session answers under the public id, and its provenance hashes cover that id
        from registry.canonical import digest_json
        from registry.provenance import inputs_hash

        sc = r2.structured_content
        assert sc["provenance"]["outputs_hash"] == digest_json({k: v for k, v in sc.items() if k != "provenance"})
        assert sc["provenance"]["inputs_hash"] == inputs_hash({"session_id": sid})
        # the pinned input changes, then the worker dies again: not rebuildable -> SESSION_NOT_FOUND
        src.write_bytes(b"changed input")
        await client.call_tool("test_crash_now", {})
        r3 = await client.call_tool("test_session_read", {"session_id": sid})
        assert r3.is_error and r3.structured_content["code"] == "SESSION_NOT_FOUND"


async def test_rollout_drains_inflight_calls_then_switches_generation(tmp_path):
    from .conftest import make_host

    host = make_host(tmp_path)
    async with connect("inproc", "legacy", tmp_path, host=host) as client:
        await client.call_tool("test_echo", {"value": 0})
        gen0 = (await client.call_tool("health", {})).structured_content["generation"]
        results = {}

        async def slow():
            results["slow"] = await client.call_tool("test_slow", {"steps": 20, "step_s": 0.05})

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow)
            await anyio.sleep(0.3)
            rolled = await host.rollout()
        assert not results["slow"].is_error  # the in-flight call finished on the draining worker
        assert rolled == {"generation": gen0 + 1, "disrupted_calls": 0}
        health = (await client.call_tool("health", {})).structured_content
        assert health["generation"] == gen0 + 1 and health["rollout_state"] == "stable"
        assert not (await client.call_tool("test_echo", {"value": 1})).is_error
