"""`dome mcp --http`: streamable HTTP with bearer-token auth, real SDK client, both protocol modes."""
from __future__ import annotations

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from .conftest import MODES, http_host

pytestmark = pytest.mark.anyio
TOKEN = "test-token-0123456789abcdef"


@pytest.fixture
def http_server(tmp_path):
    with http_host(tmp_path, TOKEN) as url:
        yield url


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
