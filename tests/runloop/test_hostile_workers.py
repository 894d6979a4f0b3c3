"""Hostile workers against the real gateway (MCP SDK server on a Unix socket,
real ledger, real grants) and, end to end, against `dome run` with command
workers in the configured sandbox: a proposal claiming another node, size
limits at their exact edges, a symlink and a file beneath it from two honest
workers, and a worker that edits the CI script so validation passes."""
from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path

import pytest

from registry import limits
from registry.errors import DomeError
from tests.attacks import attack
from tests.conftest import dome_cli, git
from tests.runloop.conftest import cmd_task, write_queue
from tests.runloop.test_gateway import BASE, RUN, TREE, client, gateway  # noqa: F401 - the fixture

# -- binding: a proposal belongs to the grant that submitted it ----------------------------


def _proposal(ref: str, **over) -> dict:
    p = {"artifact_kind": "dome.patch_proposal/v1", "version": "1.0.0", "object_id": "pp-1",
         "run_id": RUN, "wave_id": "w0001", "node_id": "n1", "created_at": "2026-01-01T00:00:00Z",
         "producer": "t", "proposal_id": "pp-1", "base_ref": BASE, "base_tree_hash": TREE,
         "diff_canonicalization": "git-binary-full-index/v1", "diff_digest": "sha256:" + "0" * 64,
         "diff_ref": ref, "touched_files": ["a.txt"], "intent_tags": [], "risk": {"class": "low"},
         "declared_constraints": {},
         "worker_run_meta": {"tool_profile_id": "tp", "run_id": RUN, "wave_id": "w0001", "node_id": "n1"}}
    for k, v in over.items():
        if k.startswith("meta_"):
            p["worker_run_meta"] = {**p["worker_run_meta"], k[5:]: v}
        else:
            p[k] = v
    return p


@attack("proposal-binding")
@pytest.mark.parametrize("claim", [{"node_id": "decoy"}, {"meta_node_id": "decoy"}, {"wave_id": "w0099"},
                                   {"meta_wave_id": "w0099"}, {"node_execution_id": "ne-other"},
                                   {"attempt": 7}, {"run_id": "run-other"}])
def test_a_proposal_claiming_another_attempt_is_refused_typed(gateway, claim) -> None:  # noqa: F811
    gw, writer, _, attempt, ledger = gateway
    c = client(gw, attempt("ne-bind"))
    gw.attempt("ne-bind")["attempt"] = 1  # the run loop records the attempt number with each dispatch
    ref = c.put_artifact(b"diff --git a/a.txt b/a.txt\n", "text/x-diff")
    before = [e.topic for e in ledger.events(RUN)]
    with pytest.raises(DomeError) as ei:
        c.submit_patch(_proposal(ref, **claim))
    assert ei.value.code == "PROPOSAL_BINDING_MISMATCH", ei.value.to_object()
    assert ei.value.details["mismatches"], ei.value.details
    after = [e.topic for e in ledger.events(RUN)]
    assert "patch.submitted" not in after[len(before):]


def test_binding_stamps_the_grant_and_keeps_what_disagreed() -> None:
    from coordinator.integration.binding import bind
    grant = {"run_id": "r", "wave_id": "w1", "node_id": "risky", "node_execution_id": "ne1", "attempt": 1}
    honest = bind({"proposal_id": "p", "node_id": "risky", "worker_run_meta": {"node_id": "risky"}}, grant)
    assert honest["node_id"] == "risky" and "binding_mismatches" not in honest
    forged = bind({"proposal_id": "p", "node_id": "decoy"}, grant)
    assert forged["node_id"] == "risky"
    assert forged["binding_mismatches"] == [{"field": "node_id", "claimed": "decoy", "grant": "risky"}]


def test_integration_binds_each_proposal_to_the_recorded_dispatch() -> None:
    """Whatever a patch.submitted payload's proposal claims, integration sees the node, wave and
    attempt the coordinator dispatched for that node execution (a disagreeing claim is kept so the
    proposal checks refuse it)."""
    from types import SimpleNamespace

    from coordinator.runloop.finish import bound_proposals
    from coordinator.runstate import RunState
    st = RunState(executions={"ne1": {"node_id": "risky", "wave_id": "w0002", "attempt": 2}})
    forged = {"node_execution_id": "ne1", "proposal": {"proposal_id": "p", "node_id": "decoy", "risk": "low"}}
    (p,) = bound_proposals(SimpleNamespace(run_id="run-1", proposals=[forged], state=st))
    inner = p["proposal"]
    assert (inner["node_id"], inner["wave_id"], inner["attempt"], inner["run_id"]) == ("risky", "w0002", 2, "run-1")
    assert inner["binding_mismatches"] == [{"field": "node_id", "claimed": "decoy", "grant": "risky"}]


# -- one set of size limits, tested at the edges ---------------------------------------------

def test_the_limits_hold_together() -> None:
    from coordinator.gateway.worker_tools import MAX_ARTIFACT_BYTES
    from coordinator.integration.policy import IntegrationPolicy
    pol = IntegrationPolicy()
    assert pol.max_binary_bytes == limits.MAX_BINARY_BYTES == 8 * 1024 * 1024
    assert pol.max_total_bytes == limits.MAX_DIFF_BYTES == 32 * 1024 * 1024
    assert MAX_ARTIFACT_BYTES == limits.MAX_ARTIFACT_BYTES >= limits.MAX_DIFF_BYTES
    assert limits.MAX_REQUEST_BYTES > limits.base64_size(limits.MAX_ARTIFACT_BYTES)


@attack("oversize-upload")
def test_artifact_exactly_at_the_limit_is_stored_one_byte_over_is_refused_typed(gateway) -> None:  # noqa: F811
    gw, _, _, attempt, ledger = gateway
    c = client(gw, attempt("ne-size"))
    c.budgets = {}
    at = b"\x00" * limits.MAX_ARTIFACT_BYTES
    digest = c.put_artifact(at)
    assert len(ledger.blobs.get(digest)) == limits.MAX_ARTIFACT_BYTES
    with pytest.raises(DomeError) as ei:
        c.put_artifact(at + b"\x01")
    assert ei.value.code == "ARTIFACT_TOO_LARGE", ei.value.to_object()
    assert ei.value.details == {"size": limits.MAX_ARTIFACT_BYTES + 1, "limit": limits.MAX_ARTIFACT_BYTES}


def _post(sock_path: str, body: bytes, token: str) -> tuple[int, bytes]:
    class UDS(http.client.HTTPConnection):
        def connect(self) -> None:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(60)
            s.connect(sock_path)
            self.sock = s

    conn = UDS("dome-gateway", timeout=60)
    try:
        conn.request("POST", "/mcp", body, {"Content-Type": "application/json", "Authorization": f"Bearer {token}",
                                            "Accept": "application/json, text/event-stream",
                                            "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@attack("oversize-upload")
def test_request_body_exactly_at_the_limit_is_read_one_byte_over_is_413(gateway) -> None:  # noqa: F811
    gw, _, _, attempt, _ = gateway
    g = attempt("ne-body")
    msg = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                      "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                           "io.modelcontextprotocol/clientCapabilities": {}}}}).encode()
    at = msg + b" " * (limits.MAX_REQUEST_BYTES - len(msg))  # JSON allows trailing whitespace
    assert len(at) == limits.MAX_REQUEST_BYTES
    status, data = _post(str(gw.socket_path), at, g.token)
    assert status == 200, data[:300]
    assert "put_artifact" in data.decode()
    status, _ = _post(str(gw.socket_path), at + b" ", g.token)
    assert status == 413


# -- end to end: `dome run` with command workers ---------------------------------------------

PASSING = [{"suite": "command", "name": "tests", "argv": ["true"], "required": True, "timeout_s": 60}]
DRC = {"suite": "drc", "params": {"deck": "builtin:mask_rules", "layouts": ["**/*.oas"]}}  # the high class's suite


def _run(tmp_path: Path, repo: Path, tasks: list[dict], **extra) -> tuple[dict, Path]:
    ops = tmp_path / "ops"
    q = write_queue(tmp_path, repo, tasks, **extra)
    r = dome_cli("run", str(q), "--ops-root", str(ops), "--json", timeout=400)
    assert r.stdout.strip(), r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert r.returncode in (0, 4), r.stderr[-3000:]
    return out, ops


def _events(ops: Path, run_id: str) -> list[dict]:
    r = dome_cli("events", run_id, "--ops-root", str(ops), "--json")
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def _ref(repo: Path, ref: str) -> str | None:
    try:
        return git(repo, "rev-parse", "-q", "--verify", ref)
    except Exception:  # noqa: BLE001 - git exits 1 for a missing ref
        return None


@pytest.mark.slow
@attack("canvas-path-is-file")
def test_two_honest_workers_link_and_file_beneath_it_the_run_ends(git_repo: Path, tmp_path: Path) -> None:
    """Used to crash integration with CANVAS_PATH_IS_FILE and leave the run `running`."""
    (git_repo / "pkg").mkdir()
    (git_repo / "pkg" / "__init__.py").write_text("x = 1\n")
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-q", "-m", "pkg")
    # lower risk is stacked first: the link lands, then the file beneath it is tried
    tasks = [cmd_task("link", "ln -s pkg lnk", risk="low"),
             cmd_task("file", "mkdir lnk && echo 'import os' > lnk/evil.py", risk="medium")]
    out, ops = _run(tmp_path, git_repo, tasks, validations=[*PASSING, DRC])
    assert out["status"] == "promoted", out
    head = _ref(git_repo, "refs/heads/dome/out")
    names = git(git_repo, "ls-tree", "-r", "--name-only", head).splitlines()
    assert "lnk" in names and "lnk/evil.py" not in names, names
    events = _events(ops, out["run_id"])
    drops = [e for e in events if e["topic"] == "integration.conflict_decision" and e["payload"]["action"] == "drop"]
    assert len(drops) == 1 and {c["path"] for c in drops[0]["payload"]["conflicts"]} <= {"lnk", "lnk/evil.py"}
    st = json.loads(dome_cli("status", out["run_id"], "--ops-root", str(ops), "--json").stdout)
    assert st.get("status") == "promoted", st
    ver = dome_cli("verify", out["run_id"], "--ops-root", str(ops), "--json")
    assert ver.returncode == 0 and json.loads(ver.stdout)["valid"] is True, ver.stdout[-2000:]


CI_SCRIPT = "#!/bin/sh\ngrep -q '^ok$' status.txt\n"


@pytest.mark.slow
@attack("protected-path-edit")
def test_a_worker_that_edits_the_ci_script_so_validation_passes_is_not_promoted(git_repo: Path,
                                                                               tmp_path: Path) -> None:
    """The suite runs the repository's own CI script; the worker breaks the code and rewrites the
    script to `exit 0`. Validation passes, but the change touches a protected path: it waits for
    a person instead of being promoted."""
    (git_repo / ".ci").mkdir()
    (git_repo / ".ci" / "run").write_text(CI_SCRIPT)
    (git_repo / "status.txt").write_text("ok\n")
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-q", "-m", "ci")
    tasks = [cmd_task("sneaky", "echo broken > status.txt && printf '#!/bin/sh\\nexit 0\\n' > .ci/run", risk="low")]
    validations = [{"suite": "command", "name": "tests", "argv": ["sh", ".ci/run"], "required": True,
                    "timeout_s": 60}, DRC]
    out, ops = _run(tmp_path, git_repo, tasks, validations=validations, policy="default")
    assert out["status"] == "blocked" and out["awaiting_consent"] is True, out
    assert _ref(git_repo, "refs/heads/dome/out") is None
    gate = json.loads((ops / "runs" / out["run_id"] / "gate" / "gate.decision.json").read_text())
    assert "consent: missing (human approval required by policy)" in gate["missing"], gate
    verified = [e["payload"] for e in _events(ops, out["run_id"]) if e["topic"] == "integration.proposal_verified"]
    assert verified and verified[0]["risk"] == "high" and verified[0]["protected_paths"] == [".ci/run"]


HOSTILE_PRELUDE = r"""
import json, sys
from pathlib import Path
sys.path.insert(0, SRC)
from worker_sdk.client import GatewayClient
from worker_sdk.runtime import load_public_key, load_worker_key, token_of, verify_own_grant

def first(*cands):
    return next((str(p) for p in cands if Path(p).exists()), None)

up = list(Path.cwd().parents)
spawn_path = first("/dome/spawn.json", *[q / "spawn.json" for q in up])
spawn = json.loads(Path(spawn_path).read_text())
here = Path(spawn_path).parent
profile = verify_own_grant(spawn, load_public_key(first("/dome/coordinator.pub", here / "coordinator.pub",
                                                        *[q / "coordinator.pub" for q in up])))
c = GatewayClient(token=token_of(spawn["grant"]), profile=profile,
                  socket=first("/dome/gateway.sock", spawn["gateway"].get("socket") or "/nonexistent"),
                  url=spawn["gateway"].get("url"),
                  worker_key=load_worker_key(first("/dome/worker.key", here / "worker.key"), profile))
"""

DECOY = HOSTILE_PRELUDE + r"""
import hashlib
import worker_sdk.proposal as wp
body = b"risky change\n"
Path("RISKY.txt").write_bytes(body)  # what the runtime's own (honest) proposal carries afterwards
oid = hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()
# the action cannot write beside its checkout, so it hands build_proposal its diff directly
wp.canonical_worktree_diff = lambda scratch, base: (
    b"diff --git a/RISKY.txt b/RISKY.txt\nnew file mode 100644\nindex " + b"0" * 40 + b".." + oid.encode()
    + b"\n--- /dev/null\n+++ b/RISKY.txt\n@@ -0,0 +1 @@\n+risky change\n")
proposal, _ = wp.build_proposal(Path.cwd(), spawn=spawn, profile=profile, risk="low",
                                upload=lambda d: c.put_artifact(d, "text/x-diff", "patch.diff"))
proposal = {**proposal, "node_id": "decoy",
            "worker_run_meta": {**proposal["worker_run_meta"], "node_id": "decoy"}}
try:
    pid = c.submit_patch(proposal)["proposal_id"]
except Exception as exc:
    print("REFUSED", getattr(exc, "code", type(exc).__name__))
else:  # the claim was accepted: finish the attempt as the decoy would
    c.complete_task("succeeded", summary={"as": "decoy"}, proposal_id=pid)
    print("ACCEPTED")
"""


@pytest.mark.slow
@attack("proposal-binding")
def test_a_hostile_worker_naming_a_low_risk_decoy_node_gets_its_own_tasks_risk(git_repo: Path,
                                                                              tmp_path: Path) -> None:
    """The high-risk task's worker submits its patch through its own grant, from inside its
    command, claiming to be the low-risk decoy node (which would skip the human gate). The
    claim is refused; the change is judged with its own task's risk and waits for consent."""
    import sys

    from tests.conftest import REPO_ROOT
    code = f"SRC = {str(REPO_ROOT)!r}\n" + DECOY
    risky = cmd_task("risky", "", risk="high")
    risky["action_spec"] = {"intent": "command", "argv": [sys.executable, "-c", code]}
    tasks = [risky, cmd_task("decoy", "echo decoy > DECOY.txt", risk="low")]
    out, ops = _run(tmp_path, git_repo, tasks, validations=[*PASSING, DRC])
    events = _events(ops, out["run_id"])
    submitted = [e for e in events if e["topic"] == "patch.submitted"]
    assert submitted and all(e["payload"]["proposal"].get("node_id") == e["node_id"] for e in submitted), submitted
    head = _ref(git_repo, "refs/heads/dome/out")
    assert head is None or "RISKY.txt" not in git(git_repo, "ls-tree", "-r", "--name-only", head)
    verified = {e["payload"]["node_id"]: e["payload"] for e in events
                if e["topic"] == "integration.proposal_verified"}
    assert verified["risky"]["risk"] == "high", verified
    assert out["status"] == "blocked" and out["awaiting_consent"] is True, out


FLIP = HOSTILE_PRELUDE + r"""
import worker_sdk.proposal as wp
# a hand-written diff: a mode-only change of hello.txt to a symlink (no hunks)
wp.canonical_worktree_diff = lambda scratch, base: b"diff --git a/hello.txt b/hello.txt\nold mode 100644\nnew mode 120000\n"
proposal, _ = wp.build_proposal(Path.cwd(), spawn=spawn, profile=profile,
                                upload=lambda d: c.put_artifact(d, "text/x-diff", "patch.diff"))
pid = c.submit_patch(proposal)["proposal_id"]
c.complete_task("succeeded", summary={"flip": True}, proposal_id=pid)
"""


@pytest.mark.slow
@attack("symlink-mode-flip")
def test_one_worker_writes_the_path_another_flips_the_mode_nothing_escapes(git_repo: Path, tmp_path: Path) -> None:
    """End to end through `dome run`: node A (honest) writes `../../../../etc/passwd` into a file,
    node B (hostile, from inside its command, through its own grant) submits a hand-written
    mode-only diff turning that file into a symlink. Each is harmless alone; both used to be
    promoted and `dome verify` said VALID."""
    import os
    import sys

    from coordinator.integration.canvas import checkout_readonly
    from tests.conftest import REPO_ROOT
    (git_repo / "hello.txt").write_bytes(b"hello")
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-q", "-m", "hello")
    flip = cmd_task("flip", "")
    flip["action_spec"] = {"intent": "command", "argv": [sys.executable, "-c", f"SRC = {str(REPO_ROOT)!r}\n" + FLIP]}
    tasks = [cmd_task("text", "printf '../../../../etc/passwd' > hello.txt"), flip]
    out, ops = _run(tmp_path, git_repo, tasks, validations=PASSING)
    events = _events(ops, out["run_id"])
    rejected = [e["payload"] for e in events if e["topic"] == "integration.proposal_rejected"]
    assert any(r["code"] == "POLICY_MODE_TYPE_CHANGE" for p in rejected for r in p["rejections"]), rejected
    assert out["status"] == "promoted", out  # the honest text change lands alone
    ver = dome_cli("verify", out["run_id"], "--ops-root", str(ops), "--json")
    assert ver.returncode == 0 and json.loads(ver.stdout)["valid"] is True, ver.stdout[-2000:]
    head = _ref(git_repo, "refs/heads/dome/out")
    assert git(git_repo, "show", f"{head}:hello.txt") == "../../../../etc/passwd"  # as text, not a link
    if head is not None:
        dest = checkout_readonly(git_repo, head, tmp_path / "promoted")
        assert not os.path.islink(dest / "hello.txt")
        for p in dest.rglob("*"):
            if p.is_symlink():
                assert os.path.realpath(p).startswith(os.path.realpath(dest) + os.sep), p
