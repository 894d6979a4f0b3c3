"""Stdout hygiene at the byte level: every line `dome mcp` writes to stdout is a JSON-RPC frame."""
from __future__ import annotations

import json
import subprocess

import pytest
import sys

from tests.conftest import REPO_ROOT

from .conftest import host_env


def _frames(*msgs: dict) -> bytes:
    return b"".join(json.dumps(m).encode() + b"\n" for m in msgs)


def test_only_protocol_frames_on_stdout(tmp_path):
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
    calls = [
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "test_noisy", "arguments": {"lines": 20}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "test_echo", "arguments": {"value": "x"}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/list"},
    ]
    proc = subprocess.Popen([sys.executable, "-m", "coordinator.cli.main", "mcp", "--ops-root", str(tmp_path)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO_ROOT,
                            env=host_env(tmp_path))
    proc.stdin.write(_frames(init, *calls))
    proc.stdin.flush()
    lines = []
    while len([x for x in lines if b'"id"' in x]) < 4:  # keep stdin open until every answer is in
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
    proc.stdin.close()
    lines += proc.stdout.read().splitlines()
    err_bytes = proc.stderr.read()
    proc.wait(timeout=30)
    lines = [x for x in lines if x.strip()]
    frames = [json.loads(line) for line in lines]  # one unparseable line fails the gate
    assert all(f.get("jsonrpc") == "2.0" for f in frames)
    by_id = {f["id"]: f for f in frames if "id" in f}
    assert set(by_id) == {1, 2, 3, 4}, err_bytes.decode()[-2000:]
    assert by_id[2]["result"]["structuredContent"]["noisy"] is True
    # the noise went to stderr instead
    err = err_bytes.decode()
    assert "noisy print 0" in err and "child writes to fd 1" in err and "python child print" in err
    assert "noise at import time" in err and "raw write to fd 1" in err


def _session_bytes(tmp_path, cache_dir, mode: str) -> list[bytes]:
    if mode == "legacy":
        msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "health", "arguments": {}}}]
    else:
        meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {}}
        msgs = [{"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta}},
                {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                 "params": {"name": "health", "arguments": {}, "_meta": meta}}]
    env = host_env(tmp_path, DOME_MCP_CACHE_DIR=str(cache_dir))
    proc = subprocess.Popen([sys.executable, "-m", "coordinator.cli.main", "mcp", "--ops-root", str(tmp_path)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO_ROOT, env=env)
    proc.stdin.write(_frames(*msgs))
    proc.stdin.flush()
    out = []
    want = sum(1 for m in msgs if "id" in m)
    while len(out) < want:
        line = proc.stdout.readline()
        assert line, "host closed stdout early"
        out.append(line)
    proc.stdin.close()
    assert proc.stdout.read() == b""
    proc.wait(timeout=30)
    return out


@pytest.mark.slow
def test_fast_cold_start_answers_are_the_sdks_own_bytes(tmp_path):
    """A cache miss (the SDK answers and is recorded) and a hit (the fast path answers) give the same frames."""
    cache = tmp_path / "cache"
    for mode in ("legacy", "modern"):
        miss = _session_bytes(tmp_path, cache, mode)
        assert list(cache.glob("mcp-fastpath-*.json")), "the SDK's answers were not recorded"
        hit = _session_bytes(tmp_path, cache, mode)
        by_id = lambda lines: {json.loads(x)["id"]: json.loads(x) for x in lines}
        a, b = by_id(miss), by_id(hit)
        assert set(a) == set(b)
        for rid in a:
            if rid == 3:  # health carries uptime: compare its shape only
                assert a[rid]["result"]["structuredContent"].keys() == b[rid]["result"]["structuredContent"].keys()
            else:
                assert a[rid] == b[rid], rid
        assert len(a[2]["result"]["tools"]) >= 25
