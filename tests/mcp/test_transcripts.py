"""The example JSON-RPC transcripts in examples/mcp/transcripts replay against a fresh `dome mcp`."""
from __future__ import annotations

import importlib.util
import json

import pytest

from tests.conftest import REPO_ROOT

HERE = REPO_ROOT / "examples" / "mcp"


def _transcript_module():
    spec = importlib.util.spec_from_file_location("dome_mcp_transcript", HERE / "transcript.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_transcripts_are_wire_frames_and_configs_parse():
    for cfg in ("claude_desktop_config.json", "cursor/mcp.json", "http_client_config.json"):
        servers = json.loads((HERE / cfg).read_text())["mcpServers"]
        assert servers
    mod = _transcript_module()
    for name in mod.SCENARIOS:
        t = json.loads((HERE / "transcripts" / f"{name}.json").read_text())
        assert t["frames"][0]["msg"]["method"] == "initialize"
        assert all(f["msg"]["jsonrpc"] == "2.0" for f in t["frames"])
        ids = [f["msg"]["id"] for f in t["frames"] if f["dir"] == "server" and "id" in f["msg"]]
        sent = [f["msg"]["id"] for f in t["frames"] if f["dir"] == "client" and "id" in f["msg"]]
        assert ids == sent  # every request answered once, in order


@pytest.mark.slow
@pytest.mark.parametrize("name", ["evaluate_optimize", "evaluate_cancel", "run_submit_poll_promote"])
def test_transcript_replays(name, iccad13):
    mod = _transcript_module()
    recorded = mod.expand(json.loads((HERE / "transcripts" / f"{name}.json").read_text()))
    assert mod.check_replay(recorded, mod.run(name)) == []
