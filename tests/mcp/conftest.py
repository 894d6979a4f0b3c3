"""MCP host tests: real SDK clients, in-process and over a real stdio subprocess, in both protocol modes."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import REPO_ROOT, make_repo

MODES = ["legacy", "2026-07-28"]  # the initialize handshake, and the stateless per-request envelope
PATHS = ["inproc", "stdio"]

def process_descendants(pid: int) -> list[int]:
    """Every live process below pid (children, their children...), read from /proc."""
    kids: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kids.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def wait_until_dead(pids: list[int], timeout_s: float = 10.0) -> None:
    """Wait until none of pids runs (gone or a zombie): a SIGKILL takes effect after kill() returns."""
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                break
            if state in ("Z", "X"):
                break
            time.sleep(0.005)
        else:
            raise AssertionError(f"process {pid} still runs {timeout_s} s after it was killed")



@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def work(ops_root: Path) -> Path:
    """The folder the test tools may write (and read) in a sandboxed worker: a write root of the host."""
    d = Path(ops_root) / "w"
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    """A real git repository with one commit on main, under a root of the host (tmp_path/ops/w/repo):
    run_submit refuses a queue whose repository lies outside the read roots."""
    return make_repo(work(tmp_path / "ops") / "repo")


def host_env(ops_root: Path, **extra: str) -> dict[str, str]:
    return {"PYTHONPATH": str(REPO_ROOT), "DOME_MCP_TEST_TOOLS": "1", "DOME_OPS_ROOT": str(ops_root),
            "DOME_MCP_WRITE_ROOTS": str(work(ops_root)),
            "CONSENT_MODE": extra.pop("CONSENT_MODE", "strict"), "PATH": os.environ.get("PATH", ""), **extra}


def make_host(ops_root: Path, consent_mode: str = "strict", **worker_env: str):
    from coordinator.mcp.catalog import default_specs
    from coordinator.mcp.dispatch import ToolHost

    return ToolHost(ops_root=ops_root, specs=default_specs(include_test=True), consent_mode=consent_mode,
                    worker_env={"DOME_MCP_TEST_TOOLS": "1", "DOME_MCP_WRITE_ROOTS": str(work(ops_root)),
                                **worker_env})


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


@contextmanager
def http_host(ops_root: Path, token: str | None, *, extra_env: dict[str, str] | None = None,
              extra_args: tuple[str, ...] = (), stderr: Path | None = None, **env: str) -> Iterator[str]:
    """`dome mcp --http` on a free loopback port with bearer `token` (None: the token file's); yields
    its URL, stops it after. `stderr`: a file that gets the door's stderr."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    full = {**os.environ, **host_env(ops_root, **({"DOME_MCP_TOKEN": token} if token else {}), **env),
            **(extra_env or {})}
    if token is None:
        full.pop("DOME_MCP_TOKEN", None)
    err = open(stderr, "wb") if stderr is not None else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, "-m", "coordinator.cli.main", "mcp", "--http", f"127.0.0.1:{port}",
                             "--ops-root", str(ops_root), *extra_args], cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                            stderr=err, env=full)
    if stderr is not None:
        err.close()  # the child holds its own copy
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def two_bars_gds(path: Path) -> None:
    """A GDS with two 10 x 2 um bars on layer 1/0, 1 um apart."""
    import klayout.db as kdb

    ly = kdb.Layout()
    ly.dbu = 0.001
    top = ly.create_cell("TOP")
    l1 = ly.layer(1, 0)
    top.shapes(l1).insert(kdb.Box(0, 0, 10000, 2000))
    top.shapes(l1).insert(kdb.Box(0, 3000, 10000, 5000))
    ly.write(str(path))
