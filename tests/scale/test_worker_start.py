"""Worker start imports only what the intent needs: a command-intent worker
never loads torch, the MCP SDK, pydantic, httpx or numpy (each costs tens to
hundreds of milliseconds on every attempt)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

HEAVY = ("torch", "numpy", "mcp", "pydantic", "pydantic_core", "httpx", "klayout", "anyio", "starlette",
         "uvicorn", "sqlalchemy", "ray")


def _env() -> dict[str, str]:
    return {"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}


def test_the_worker_entry_imports_nothing_heavy_before_its_spawn_spec(tmp_path: Path) -> None:
    """`python -m worker_sdk SPEC`, as the executors start it, on a spec it refuses:
    every module it imported up to that point is listed by -X importtime."""
    spec = tmp_path / "spawn.json"
    spec.write_text("{}")
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "worker_sdk", str(spec)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=_env())
    assert proc.returncode == 2 and "dome_worker_error" in proc.stderr, proc.stderr[-2000:]
    imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    assert "worker_sdk" in imported and "jsonschema" in imported  # the spec is checked against its schema
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


def test_a_command_attempt_loads_no_heavy_module() -> None:
    """Everything a command-intent attempt imports on its way (runtime, gateway
    client, proposal builder, the intent's handler), in a fresh interpreter."""
    code = ("import sys, json\n"
            "import worker_sdk.runtime, worker_sdk.client, worker_sdk.proposal\n"
            "from worker_sdk.intents import resolve, handler_action\n"
            "resolve('command'); handler_action({'intent': 'command', 'argv': ['true']})\n"
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=REPO_ROOT, env=_env())
    assert out.returncode == 0, out.stderr
    loaded = set(json.loads(out.stdout))
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
