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


def start_gateway(ledger, keyring, signer, socket_path: Path, run_id: str, base_ref: str):
    """A real worker gateway on a Unix socket over a run that has started: returns
    (gateway, writer, verifier, attempts), `attempts` the map the gateway reads each
    attempt's facts from (node_execution_id -> facts), for the test to fill."""
    from coordinator import runstate as rs
    from coordinator.gateway.dispatch import ToolDispatcher
    from coordinator.gateway.server import WorkerGateway
    from coordinator.gateway.worker_tools import GatewayBackend, build_tools
    from coordinator.grants import GrantVerifier
    from coordinator.runloop.writer import LedgerWriter, WriterLedger
    from coordinator.runstate import RunState

    writer = LedgerWriter(ledger, run_id, signer, RunState())
    writer.append(rs.RUN_STARTED, {"base_ref": base_ref})
    attempts: dict[str, dict] = {}
    verifier = GrantVerifier(keyring, WriterLedger(writer))
    backend = GatewayBackend(run_id=run_id, writer=writer, blobs=ledger.blobs, attempt=attempts.get)
    gw = WorkerGateway(run_id=run_id, verifier=verifier, dispatcher=ToolDispatcher(build_tools(backend)),
                       socket_path=socket_path, attempt=attempts.get)
    gw.start()
    return gw, writer, verifier, attempts


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
