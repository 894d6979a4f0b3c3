"""MCP host tests: real SDK clients, in-process and over a real stdio subprocess, in both protocol modes."""
from __future__ import annotations

import json
import os
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import REPO_ROOT

MODES = ["legacy", "2026-07-28"]  # the initialize handshake, and the stateless per-request envelope
PATHS = ["inproc", "stdio"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def host_env(ops_root: Path, **extra: str) -> dict[str, str]:
    return {"PYTHONPATH": str(REPO_ROOT), "DOME_MCP_TEST_TOOLS": "1", "DOME_OPS_ROOT": str(ops_root),
            "CONSENT_MODE": extra.pop("CONSENT_MODE", "strict"), "PATH": os.environ.get("PATH", ""), **extra}


def make_host(ops_root: Path, consent_mode: str = "strict", **worker_env: str):
    from coordinator.mcp.catalog import default_specs
    from coordinator.mcp.dispatch import ToolHost

    return ToolHost(ops_root=ops_root, specs=default_specs(include_test=True), consent_mode=consent_mode,
                    worker_env={"DOME_MCP_TEST_TOOLS": "1", **worker_env})


@asynccontextmanager
async def connect(path: str, mode: str, ops_root: Path, *, consent_mode: str = "strict",
                  host: Any = None) -> AsyncIterator[Client]:
    if path == "inproc":
        from coordinator.mcp.server import build_server

        server = build_server(host or make_host(ops_root, consent_mode))
        async with Client(server, mode=mode, cache=None) as client:
            yield client
    else:
        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "coordinator.cli.main", "mcp", "--ops-root", str(ops_root)],
                                       env=host_env(ops_root, CONSENT_MODE=consent_mode), cwd=str(REPO_ROOT))
        async with Client(params, mode=mode, cache=None) as client:
            yield client


def job_files(ops_root: Path) -> list[dict[str, Any]]:
    d = ops_root / "mcp" / "jobs"
    return [json.loads(p.read_text()) for p in sorted(d.glob("job_*.json"))] if d.is_dir() else []


async def poll_done(client: Client, job_id: str, timeout: float = 240) -> dict[str, Any]:
    """Poll a job through the MCP client until it leaves queued/running; its last status."""
    import anyio

    with anyio.fail_after(timeout):
        while True:
            st = (await client.call_tool("poll", {"job_id": job_id})).structured_content
            if st["status"] not in ("queued", "running"):
                return st
            await anyio.sleep(0.25)
