"""Sandbox: SpawnSpec validation, refusal without a sandbox, and escape attempts (real bubblewrap)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator import runstate as rs
from coordinator.executors import SandboxUnavailable, SpawnSpecInvalid, validate_spawn_spec
from coordinator.executors.sandbox import probe_bwrap
from tests.runloop.conftest import cmd_task, run_queue, write_queue

needs_bwrap = pytest.mark.skipif(not probe_bwrap()[0], reason="bubblewrap cannot create namespaces here")

GOOD = {
    "artifact_kind": "dome.spawn_spec/v1", "run_id": "r1", "wave_id": "w0001", "node_id": "n",
    "node_execution_id": "ne-1", "task_spec_ref": "sha256:" + "1" * 64, "tool_profile_ref": "sha256:" + "2" * 64,
    "container_ref": "host@sha256:" + "3" * 64, "action_spec": {"intent": "command", "argv": ["true"]},
    "determinism_seed": 1, "inputs_hash": "sha256:" + "4" * 64, "base_ref": "5" * 40, "base_tree_hash": "6" * 40,
    "gateway": {"socket": "/dome/gateway.sock"},
}


def test_spawn_spec_fails_closed():
    validate_spawn_spec(GOOD)
    for bad in ({**GOOD, "privileged": True}, {k: v for k, v in GOOD.items() if k != "inputs_hash"},
                {**GOOD, "task_spec_ref": "main"}, {**GOOD, "container_ref": "ubuntu:latest"},
                {**GOOD, "base_ref": "main"}, {**GOOD, "action_spec": {"intent": "command", "argv": ["x"], "sudo": 1}}):
        with pytest.raises(SpawnSpecInvalid):
            validate_spawn_spec(bad)


def test_no_sandbox_refuses_unless_explicit(monkeypatch):
    from coordinator.executors import local, make_executor
    monkeypatch.setattr(local, "probe_bwrap", lambda: (False, "bwrap is not installed"))
    with pytest.raises(SandboxUnavailable) as ei:
        make_executor("local", sandbox="bwrap")
    assert "--sandbox none" in " ".join(ei.value.hints)
    assert make_executor("local", sandbox="none").sandbox == "none"


@needs_bwrap
def test_escape_attempts_are_stopped_and_reported(git_repo, ops_root, ledger_env, tmp_path):
    ledger, signer, _ = ledger_env
    outside = tmp_path / "outside.txt"
    key_file = ops_root / "keys" / "coordinator.ed25519"
    assert key_file.exists()
    key_before = key_file.read_bytes()
    tasks = [
        cmd_task("write-outside", f"echo pwned > {outside} || echo pwned > {git_repo}/.git/pwned "
                                  "|| echo pwned > /usr/pwned || echo pwned > /dome/pwned",
                 max_attempts=1),
        cmd_task("read-keys", f"cat {key_file} > stolen.txt && test -s stolen.txt", max_attempts=1),
        cmd_task("open-tcp", "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)\" "
                             "|| python3 -c \"import socket; socket.create_connection(('127.0.0.1', 22), timeout=3)\"",
                 max_attempts=1),
        cmd_task("fork-bomb", "i=0; while [ $i -lt 400 ]; do sleep 30 & i=$((i+1)); done; wait", max_attempts=1,
                 timeout_s=60),
        cmd_task("honest", "echo ok > ok.txt", max_attempts=1),
    ]
    q = write_queue(tmp_path, git_repo, tasks, limits={"max_processes": 48},
                    scheduling={"max_parallel": 2, "endgame_max_duplicates": 0})
    loop, out = run_queue(q, ops_root, ledger_env, sandbox="bwrap")
    assert out.status == "failed"
    assert not outside.exists() and not (git_repo / ".git" / "pwned").exists() and not Path("/usr/pwned").exists()
    assert key_file.read_bytes() == key_before
    ev = ledger.events(out.run_id)
    by_node: dict[str, list] = {}
    for e in ev:
        if e.node_id:
            by_node.setdefault(e.node_id, []).append(e)

    def failure(node):
        ends = [e for e in by_node[node] if e.topic in (rs.TASK_COMPLETED, rs.TASK_FAILED, rs.TASK_TIMEOUT)]
        assert len(ends) == 1, node
        e = ends[0]
        assert e.topic != rs.TASK_COMPLETED or e.payload["outcome"] == "failed", node
        return json.dumps(e.payload)

    wo = failure("write-outside")
    assert "Directory nonexistent" in wo  # the host tree is not even visible
    assert "Read-only file system" in wo or "Permission denied" in wo  # and what is visible is read-only
    assert "No such file" in failure("read-keys")
    assert "unreachable" in failure("open-tcp").lower() or "Permission denied" in failure("open-tcp")
    bomb = failure("fork-bomb")
    violations = [e for e in by_node["fork-bomb"] if e.topic == rs.SANDBOX_VIOLATION]
    assert violations or "SANDBOX_VIOLATION" in bomb
    # nothing leaked into proposals; the honest node still produced one
    proposals = [e for e in ev if e.topic == rs.PATCH_SUBMITTED]
    assert [p.node_id for p in proposals] == ["honest"]
    assert ledger.verify(ledger_env[2]).ok
