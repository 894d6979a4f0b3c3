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


def open_attempt(started, signer, repo: Path, run_id: str, neid: str, *, path: str = "out/a.txt",
                 caps=("write",)):
    """One live attempt on a gateway from `start_gateway`: dispatched, granted and its call key
    bound as the run loop does. Returns (client, proposal, diff, grant): the real SDK client of
    the attempt and the proposal (with its diff) that writes `path` in `repo`'s checkout."""
    from coordinator import runstate as rs
    from coordinator.gateway import auth as grants_io
    from registry.canonical import digest_bytes
    from registry.signing import SigningKey
    from tests.conftest import git
    from worker_sdk.client import GatewayClient
    from worker_sdk.proposal import build_proposal

    gw, writer, verifier, attempts = started
    base = git(repo, "rev-parse", "HEAD").strip()
    tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
    node = "n-" + neid
    attempts[neid] = {"node_id": node, "wave_id": "w1", "base_ref": base, "base_tree_hash": tree,
                      "task": {"node_id": node}}
    writer.append(rs.TASK_DISPATCHED, {"node_execution_id": neid}, node_id=node, node_execution_id=neid)
    key = SigningKey.generate()
    g, issued = grants_io.issue(key=signer, run_id=run_id, wave_id="w1", node_id=node, node_execution_id=neid,
                                capabilities=list(caps), ttl_s=60, policy_id="default", seed=1,
                                inputs_hash="sha256:" + "0" * 64, worker_public_key=key.public.raw)
    writer.append("grant.issued", issued, node_id=node, node_execution_id=neid)
    verifier.bind_call_key(g.jti, key)
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(neid + "\n")
    spawn = {"base_ref": base, "base_tree_hash": tree, "run_id": run_id, "wave_id": "w1", "node_id": node,
             "node_execution_id": neid, "action_spec": {"intent": "command"}, "determinism_seed": 1,
             "inputs_hash": "sha256:" + "0" * 64}
    proposal, diff = build_proposal(repo, spawn=spawn, profile=dict(g.payload), upload=digest_bytes)
    (repo / path).unlink()
    c = GatewayClient(token=g.token, profile=dict(g.payload), socket=str(gw.socket_path), worker_key=key)
    return c, proposal, diff, g


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
