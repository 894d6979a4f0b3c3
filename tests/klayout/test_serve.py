"""The JSON-lines worker process answers every tool and keeps stdout clean."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_worker_process_round_trip(kl_env) -> None:
    msgs = [{"id": 1, "tool": "open_layout", "request": {"path": str(kl_env["gds"]), "top_cell": "TOP"}},
            {"id": 2, "tool": "list_layers", "request": {"session_id": "ses_000000000000"}},
            {"id": 3, "tool": "no_such_tool", "request": {}}]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    lines = "\n".join(json.dumps(m) for m in msgs) + "\nnot json\n"
    proc = subprocess.run([sys.executable, "-m", "worker_sdk.klayout_tools.serve"], input=lines, env=env,
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    out = [json.loads(x) for x in proc.stdout.splitlines()]
    assert len(out) == 4 and proc.returncode == 0
    assert out[0]["ok"] and out[0]["result"]["selected_top_cell"] == "TOP"
    assert out[1]["error"]["code"] == "SESSION_NOT_FOUND"
    assert out[2]["error"]["code"] == "INVALID_TARGET" and out[3]["error"]["code"] == "INVALID_TARGET"
