"""External conformance: the MCP Inspector CLI (npm @modelcontextprotocol/inspector) lists and calls tools over stdio.

scripts/setup.sh installs it (pinned). Elsewhere the test skips when neither `mcp-inspector` nor a cached
npx copy is available; under CI=true a missing Inspector is a failure, never a skip.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

INSPECTOR_VERSION = os.environ.get("DOME_MCP_INSPECTOR_VERSION", "2.12.0")


def _inspector() -> list[str]:
    exe = os.environ.get("DOME_MCP_INSPECTOR") or shutil.which("mcp-inspector")
    if exe:
        return [exe]
    npx = shutil.which("npx")
    if npx:
        probe = subprocess.run([npx, "--no-install", "mcp-inspector", "--help"], capture_output=True, timeout=120)
        if probe.returncode == 0:
            return [npx, "--no-install", "mcp-inspector"]
    reason = f"MCP Inspector CLI not installed (npm install -g @modelcontextprotocol/inspector@{INSPECTOR_VERSION})"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def _run(tmp_path, *method_args: str, expect_error: bool = False) -> dict:
    argv = [*_inspector(), "--cli", "-e", f"PYTHONPATH={REPO_ROOT}", "-e", "DOME_MCP_TEST_TOOLS=1",
            "-e", f"DOME_MCP_CACHE_DIR={tmp_path / 'cache'}",
            sys.executable, "-m", "coordinator.cli.main", "mcp", "--ops-root", str(tmp_path / "ops"), *method_args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=REPO_ROOT)
    if not expect_error:  # newer Inspectors exit 1 on an isError result; the JSON is still printed
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(proc.stdout[proc.stdout.index("{"):])


def test_inspector_lists_and_calls_tools_over_stdio(tmp_path):
    listed = _run(tmp_path, "--method", "tools/list")
    names = {t["name"] for t in listed["tools"]}
    assert {"evaluate", "optimize", "open_layout", "run_submit", "promote", "health", "telemetry"} <= names
    health = _run(tmp_path, "--method", "tools/call", "--tool-name", "health")
    assert health["structuredContent"]["lifecycle_state"] == "ready"
    assert health["content"][0]["text"].startswith("ok health")
    echo = _run(tmp_path, "--method", "tools/call", "--tool-name", "test_echo", "--tool-arg", "n=5")
    assert echo["structuredContent"]["n"] == 5
    missing = _run(tmp_path, "--method", "tools/call", "--tool-name", "poll", "--tool-arg", "job_id=job_0123456789abcdef",
                   expect_error=True)
    assert missing["isError"] is True and missing["structuredContent"]["code"] == "JOB_NOT_FOUND"
