"""`dome mcp --http`: streamable HTTP with bearer-token auth, real SDK client, both protocol modes."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import REPO_ROOT

from .conftest import MODES, host_env

pytestmark = pytest.mark.anyio
TOKEN = "test-token-0123456789abcdef"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def http_server(tmp_path):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "coordinator.cli.main", "mcp", "--http", f"127.0.0.1:{port}",
                             "--ops-root", str(tmp_path)], cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, **host_env(tmp_path, DOME_MCP_TOKEN=TOKEN)})
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=20)


async def test_http_requires_bearer_token(http_server):
    async with httpx2.AsyncClient() as http:
        r = await http.post(http_server, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                            headers={"accept": "application/json, text/event-stream"})
        assert r.status_code == 401 and "bearer" in r.headers["www-authenticate"].lower()
        r = await http.post(http_server, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                            headers={"authorization": "Bearer wrong", "accept": "application/json, text/event-stream"})
        assert r.status_code == 401


@pytest.mark.parametrize("mode", MODES)
async def test_http_lists_and_calls_with_token(http_server, mode):
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http:
        async with Client(streamable_http_client(http_server, http_client=http), mode=mode, cache=None) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"evaluate", "open_layout", "promote", "health"} <= names
            res = await client.call_tool("health", {})
            assert res.structured_content["lifecycle_state"] == "ready"
            res = await client.call_tool("test_echo", {"value": 1, "n": "2"})
            assert not res.is_error and res.structured_content["n"] == 2
