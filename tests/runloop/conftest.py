"""Fixtures for run-loop tests: a real ledger, keys, work queues on real git repos."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git


def cmd_task(nid: str, script: str, deps=(), outputs=("patch_proposal",), **extra) -> dict[str, Any]:
    return {"node_id": nid, "containers": [], "required_capabilities": ["write"],
            "required_outputs": list(outputs), "dependencies": list(deps),
            "action_spec": {"intent": "command", "argv": ["sh", "-c", script]}, **extra}


# the suite the default policy requires for low-risk work (pre-flight refuses a queue without it)
TESTS_SUITE = {"suite": "command", "name": "tests", "argv": ["true"]}


def write_queue(dir_: Path, repo: Path, tasks: list[dict], **extra) -> Path:
    q = {"artifact_kind": "dome.work.queue/v1", "repo": str(repo), "base_ref": "main", "determinism_seed": 11,
         "policy": "default", "promote_to": "refs/heads/dome/out", "tasks": tasks, "validations": [TESTS_SUITE],
         **extra}
    path = dir_ / "work.queue.json"
    path.write_text(json.dumps(q, indent=1))
    return path


@pytest.fixture
def ledger_env(ops_root: Path):
    from coordinator.keys import load_keyring, load_or_create_signing_key
    from ledger import Ledger

    ledger = Ledger.open(None, ops_root)
    signer = load_or_create_signing_key(ops_root)
    yield ledger, signer, load_keyring(ops_root)
    ledger.close()


def run_queue(queue: Path, ops_root: Path, ledger_env, **ctx_kw):
    from coordinator.runloop.loop import RunContext, RunLoop

    ledger, signer, keyring = ledger_env
    ctx = RunContext(ledger=ledger, ops_root=ops_root, signer=signer, keyring=keyring, **ctx_kw)
    loop = RunLoop.start(queue, ctx)
    return loop, loop.run()


def topics(ledger, run_id: str) -> list[str]:
    return [e.topic for e in ledger.events(run_id)]


__all__ = ["cmd_task", "write_queue", "run_queue", "topics", "git"]
