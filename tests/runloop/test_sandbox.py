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
    from coordinator.executors import make_executor, sandbox
    monkeypatch.setattr(sandbox, "probe_bwrap", lambda: (False, "bwrap is not installed"))
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


THIEF = '''
import base64, json, sys, time
sys.path.insert(0, %(root)r)
from registry import toolprofile as tp
from registry.errors import DomeError
from registry.signing import SigningKey
from worker_sdk.client import GatewayClient
spawn = json.load(open("/dome/spawn.json"))
token = tp.envelope_to_token(spawn["grant"])
profile = json.loads(base64.b64decode(spawn["grant"]["payload"]))
neid = spawn["node_execution_id"]
kid, seed = open("/dome/worker.key").read().split()[:2]
real = SigningKey(base64.b64decode(seed))
bare = {k: v for k, v in profile.items() if k != "cnf"}
c = GatewayClient(token=token, profile=bare, socket="/dome/gateway.sock")  # the stolen token alone
now = int(time.time())
def proof(key, args, ts=None, **over):
    return tp.make_call_proof(key, jti=profile["jti"], method="report_progress", args={**args, **over},
                              idempotency_key=args["idempotency_key"], ts=now if ts is None else ts, nonce="x")
cases = {"no_proof": None,
         "other_key": lambda n, a: proof(SigningKey.generate(), a),
         "other_args": lambda n, a: proof(real, a, fraction=0.99),
         "stale": lambda n, a: proof(real, a, ts=now - 600),
         "mac_other_key": lambda n, a: tp.make_call_mac(tp.call_mac_key(SigningKey.generate().seed),
                                                        jti=profile["jti"], method="report_progress", args=a,
                                                        idempotency_key=a["idempotency_key"], ts=now,
                                                        nonce="0000000000000001")}
codes = {}
for i, (name, maker) in enumerate(cases.items()):
    if maker is not None:
        c._worker_key, c._proof = real, maker
    args = {"idempotency_key": f"{neid}:report_progress:thief{i}", "node_execution_id": neid, "fraction": 0.5}
    try:
        c.call("report_progress", args)
        codes[name] = "ACCEPTED"
    except DomeError as exc:
        codes[name] = exc.code
open("codes.json", "w").write(json.dumps(codes, sort_keys=True))
print(json.dumps(codes, sort_keys=True))
'''


@needs_bwrap
def test_sender_constrained_grants_end_to_end(git_repo, ops_root, ledger_env, tmp_path):
    """A real bubblewrap run: every attempt gets a cnf-bound grant and its own key
    file; the workers' proofed calls promote; calls with the attempt's token but
    no proof, a proof by another key (signed or MAC), over other arguments or stale are refused,
    each with its own code, and leave only grant.rejected in the ledger."""
    from tests.conftest import REPO_ROOT, git
    ledger, _, _ = ledger_env
    (git_repo / "thief.py").write_text(THIEF % {"root": str(REPO_ROOT)})
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-q", "-m", "thief")
    tasks = [cmd_task("thief", "python3 thief.py", max_attempts=1),
             cmd_task("honest", "echo ok > ok.txt", max_attempts=1)]
    q = write_queue(tmp_path, git_repo, tasks, scheduling={"max_parallel": 2, "endgame_max_duplicates": 0})
    loop, out = run_queue(q, ops_root, ledger_env, sandbox="bwrap")
    assert out.status in ("completed", "promoted"), out
    ev = ledger.events(out.run_id)
    done = [e for e in ev if e.topic == rs.TASK_COMPLETED and e.node_id == "thief"]
    assert len(done) == 1 and done[0].payload["outcome"] == "succeeded"  # the worker's own proofed calls work
    codes = json.loads(done[0].payload["summary"]["stdout_tail"])
    assert codes == {"no_proof": "GRANT_PROOF_MISSING", "other_key": "GRANT_PROOF_INVALID",
                     "other_args": "GRANT_PROOF_MISMATCH", "stale": "GRANT_PROOF_STALE",
                     "mac_other_key": "GRANT_PROOF_INVALID"}
    assert len(out.counts) and out.counts["succeeded"] == 2
    issued = [e for e in ev if e.topic == "grant.issued"]
    assert len(issued) == 2 and all("cnf" in e.payload["profile"] for e in issued)
    assert len({e.payload["profile"]["cnf"]["kid"] for e in issued}) == 2  # a fresh key per attempt
    rejected = [e for e in ev if e.topic == "grant.rejected"]
    assert sorted(e.payload["code"] for e in rejected) == sorted(codes.values())
    thief_keys = {e.payload.get("idempotency_key") for e in ev if e.topic in (rs.TASK_PROGRESS, "grant.call")}
    assert not any("thief" in str(k) for k in thief_keys)  # only the rejections reached the ledger
    calls = [e for e in ev if e.topic == "grant.call"]
    assert calls and all(e.payload["outcome"] == "ok" for e in calls)
    # the private keys are in no event and no SpawnSpec; their files live only in the run's
    # scratch folder, which is gone when the run ends, and never under the ops root
    dump = json.dumps([e.payload for e in ev])
    assert "worker.key" not in dump and "seed" not in dump.lower().replace("determinism_seed", "")
    assert not Path(loop.work).exists()
    assert not list(ops_root.rglob("worker.key"))
