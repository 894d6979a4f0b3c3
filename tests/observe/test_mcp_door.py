"""The MCP HTTP door: /metrics (tool latency, schema failures), one span per tool call over
OTLP, JSON log lines with request ids, and the call timeout set from the environment."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import REPO_ROOT
from tests.mcp.conftest import host_env
from tests.observe.helpers import free_port, get, wait_until
from tests.observe.receiver import Receiver

TOKEN = "door-token-0123456789abcdef"


def _door(ops_root: Path, stderr, **extra: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "coordinator.cli.main", "mcp", "--http", f"127.0.0.1:{port}",
                             "--ops-root", str(ops_root)], cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=stderr,
                            env={**os.environ, **host_env(ops_root, DOME_MCP_TOKEN=TOKEN, **extra)})
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: _up(url, proc), 60, "dome mcp --http")
    return proc, url


def _up(url: str, proc: subprocess.Popen) -> bool:
    assert proc.poll() is None, "dome mcp exited"
    try:
        return get(url + "/metrics", token=TOKEN, timeout=2)[0] == 200
    except OSError:
        return False


def _calls(url: str) -> list:
    async def go():
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}", "x-request-id": "req-42"},
                                      timeout=60) as http:
            async with Client(streamable_http_client(url + "/mcp", http_client=http), cache=None) as client:
                return [await client.call_tool("health", {}),
                        await client.call_tool("test_echo", {"value": 1, "n": "2"}),
                        await client.call_tool("test_echo", {"value": 1, "bogus": True}),
                        await client.call_tool("test_slow", {"steps": 50, "step_s": 0.1})]
    import anyio
    return anyio.run(go)


def _samples(text: str, name: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(name):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


@pytest.mark.slow
def test_door_metrics_spans_logs_and_call_timeout(tmp_path: Path) -> None:
    err = (tmp_path / "stderr.txt").open("w")
    with Receiver() as rx:
        proc, url = _door(tmp_path / "ops", err, OTEL_EXPORTER_OTLP_ENDPOINT=rx.endpoint, DOME_LOG_FORMAT="json",
                          DOME_MCP_CALL_TIMEOUT_S="1")
        try:
            assert get(url + "/metrics", token=None)[0] == 401  # behind the door's bearer token
            health, echo, bad, slow = _calls(url)
            assert not health.is_error and not echo.is_error
            assert bad.is_error and bad.structured_content["code"] == "INVALID_REQUEST"
            # 50 x 0.1 s, stopped by the 1 s call timeout from the environment (a Convergent tool is
            # replayed after each timeout until the host gives up)
            assert slow.is_error and (slow.structured_content["category"] == "timeout"
                                      or slow.structured_content["code"] == "REPLAY_EXHAUSTED"), slow.structured_content
            status, body = get(url + "/metrics", token=TOKEN)
            text = body.decode()
            counts = _samples(text, "dome_mcp_tool_seconds_count")
            assert counts['dome_mcp_tool_seconds_count{tool="health"}'] == 1
            assert counts['dome_mcp_tool_seconds_count{tool="test_echo"}'] == 2
            assert _samples(text, "dome_schema_failures_total")['dome_schema_failures_total{where="mcp"}'] == 1
            assert _samples(text, "dome_mcp_tool_calls_total")['dome_mcp_tool_calls_total{ok="false",tool="test_echo"}'] == 1
            wait_until(lambda: len(rx.spans) >= 4, 10, "the door's spans")  # batches leave every second
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    names = sorted(s["name"] for s in rx.spans)
    assert names.count("mcp test_echo") == 2 and "mcp health" in names and "mcp test_slow" in names
    err.close()
    lines = [json.loads(x) for x in (tmp_path / "stderr.txt").read_text().splitlines() if x.startswith("{")]
    calls = [x for x in lines if x.get("msg") == "mcp.call"]
    assert len(calls) == 4 and {c["tool"] for c in calls} == {"health", "test_echo", "test_slow"}
    assert all(set(c) >= {"ts", "level", "tool", "ok", "ms", "request_id"} for c in calls)


@pytest.mark.parametrize("argv,env,code", [
    (["mcp", "--call-timeout", "-1", "tools"], {}, "CONFIG_INVALID"),
    (["mcp", "tools"], {"DOME_MCP_CALL_TIMEOUT_S": "soon"}, "CONFIG_INVALID"),
    (["mcp", "tools"], {"DOME_MCP_CALL_TIMOUT_S": "5"}, "CONFIG_UNKNOWN"),
    (["mcp", "tools"], {"DOME_MCP_BIND": "nohost"}, "CONFIG_INVALID"),
    (["mcp", "tools"], {"CONSENT_MODE": "maybe"}, "CONFIG_INVALID"),
    (["mcp", "tools"], {"OTEL_TRACES_EXPORTER": "zipkin"}, "TELEMETRY_CONFIG_INVALID"),
    (["serve", "--bind", "127.0.0.1:99999"], {}, "CONFIG_INVALID"),
    (["serve"], {"DOME_LOG_FORMAT": "xml"}, "CONFIG_INVALID"),
    (["serve"], {}, "LEDGER_NOT_FOUND"),
    (["run", "q.json", "--sandbox", "none"], {"DOME_MAX_PARALLEL": "0"}, "CONFIG_INVALID"),
])
def test_bad_settings_are_refused_at_start_and_nothing_is_written(tmp_path, argv, env, code) -> None:
    ops = tmp_path / "ops"
    full_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **env}
    res = subprocess.run([sys.executable, "-m", "coordinator.cli.main", *argv, "--ops-root", str(ops), "--json"],
                         cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert json.loads(res.stdout.splitlines()[-1])["error"]["code"] == code
    assert not ops.exists()
