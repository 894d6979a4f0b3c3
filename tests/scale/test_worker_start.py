"""Worker start imports only what the intent needs: a command-intent worker
never loads torch, the MCP SDK, pydantic, httpx or numpy (each costs tens to
hundreds of milliseconds on every attempt), nor jsonschema while its SpawnSpec
is good (a small checker passes it; only a bad spec brings in the full
validator, to name what is wrong)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

HEAVY = ("torch", "numpy", "mcp", "pydantic", "pydantic_core", "httpx", "klayout", "anyio", "starlette",
         "uvicorn", "sqlalchemy", "ray")
VALIDATOR = ("jsonschema", "referencing", "jsonschema_specifications", "rpds")


def _env() -> dict[str, str]:
    return {"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}


def _start(tmp_path: Path, spec: dict) -> tuple[set[str], dict]:
    """`python -m worker_sdk SPEC`, as the executors start it, up to where it stops (no coordinator
    key here, or a refused spec): the modules -X importtime lists, and the error it printed."""
    path = tmp_path / "spawn.json"
    path.write_text(json.dumps(spec))
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "worker_sdk", str(path)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**_env(), "DOME_COORDINATOR_PUB": str(tmp_path / "absent.pub")})
    assert proc.returncode == 2, proc.stderr[-2000:]
    imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    errors = [json.loads(line)["dome_worker_error"] for line in proc.stderr.splitlines() if "dome_worker_error" in line]
    assert len(errors) == 1, proc.stderr[-2000:]
    return imported, errors[0]


def test_the_worker_entry_imports_nothing_heavy_before_its_spawn_spec(tmp_path: Path) -> None:
    """A good SpawnSpec is checked without jsonschema: the worker gets past it (to the missing key)."""
    from tests.registry.test_schema_lite import good_spec

    imported, err = _start(tmp_path, good_spec())
    assert err["code"] == "WORKER_START_FAILED" and "absent.pub" in err["message"], err  # past the spec check
    assert "worker_sdk" in imported
    assert not imported & set(HEAVY + VALIDATOR), sorted(imported & set(HEAVY + VALIDATOR))


@pytest.mark.parametrize("broken", [{}, {"unknown_field": 1}, {"inputs_hash": "sha256:" + "a" * 63},
                                    {"base_ref": "a" * 40 + "\n"}, {"action_spec": {"intent": "command"}}])
def test_a_bad_spawn_spec_is_still_refused_with_the_schema_error(tmp_path: Path, broken: dict) -> None:
    """Any spec the schema refuses is refused at start with SCHEMA_VALIDATION_ERROR naming the problem,
    as the full validator (loaded only then) reports it."""
    from tests.registry.test_schema_lite import good_spec

    spec = {**good_spec(), **broken} if broken else {}
    imported, err = _start(tmp_path, spec)
    assert err["code"] == "SCHEMA_VALIDATION_ERROR", err
    assert err["details"]["errors"] and err["details"]["schema"] == "spawn_spec"
    assert "jsonschema" in imported and not imported & set(HEAVY)


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
    assert not loaded & set(HEAVY + VALIDATOR), sorted(loaded & set(HEAVY + VALIDATOR))
