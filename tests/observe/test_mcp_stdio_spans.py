"""The stdio door traces its tool calls like the HTTP door: one span per call over OTLP and a JSON
log line on stderr (stdout stays the protocol's), through the real MCP SDK client."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import REPO_ROOT
from tests.mcp.conftest import host_env
from tests.observe.helpers import wait_until
from tests.observe.receiver import Receiver


@pytest.mark.timeout(180)
def test_stdio_door_sends_a_span_and_a_json_log_line_per_call(tmp_path: Path) -> None:
    ops = tmp_path / "ops"
    err_path = tmp_path / "stderr.txt"
    with Receiver() as rx:
        env = {**os.environ, **host_env(ops), "OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint, "DOME_LOG_FORMAT": "json"}
        # the door's stderr into a file: its JSON log lines are read there
        cmd = f'exec "{sys.executable}" -m coordinator.cli.main mcp --ops-root "{ops}" 2>"{err_path}"'
        params = StdioServerParameters(command="sh", args=["-c", cmd], env=env, cwd=str(REPO_ROOT))

        async def go():
            async with Client(params, cache=None) as client:
                return [await client.call_tool("health", {}),
                        await client.call_tool("test_echo", {"value": 1, "n": "2"})]

        health, echo = anyio.run(go)
        assert not health.is_error and not echo.is_error
        # the last batch leaves when the door closes (the client's exit ends the process)
        wait_until(lambda: len(rx.spans) >= 2, 20, "the stdio door's spans")
    names = sorted(s["name"] for s in rx.spans)
    assert names == ["mcp health", "mcp test_echo"], names
    lines = [json.loads(x) for x in err_path.read_text().splitlines() if x.startswith("{")]
    calls = [x for x in lines if x.get("msg") == "mcp.call"]
    assert {c["tool"] for c in calls} == {"health", "test_echo"} and all(c["ok"] for c in calls)
    # each call names its client: the stdio door's is the process that started it
    assert all(str(c.get("client", "")).startswith("stdio:") for c in calls), calls
    assert all(str(s["attributes"].get("dome.client", "")).startswith("stdio:") for s in rx.spans), rx.spans
