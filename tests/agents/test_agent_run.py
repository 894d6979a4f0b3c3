"""Model-driven agents in a real run: the run loop, real bubblewrap sandboxes with
no network, the egress gate, the official OpenAI SDK in the worker, a scripted
OpenAI-compatible endpoint on loopback, budgets and the ledger."""
from __future__ import annotations

import json
import os
import secrets

import pytest

from coordinator import runstate as rs
from coordinator.egress import metering as mt
from coordinator.egress.config import EgressConfig
from coordinator.executors.sandbox import probe_bwrap
from coordinator.runloop.finish import integration_finish
from tests.agents.helpers import HOST, MODEL, card, load_scripted_llm
from tests.conftest import REPO_ROOT, git
from tests.runloop.conftest import cmd_task, run_queue, write_queue

needs_bwrap = pytest.mark.skipif(not probe_bwrap()[0] and not os.environ.get("CI"),
                                 reason="bubblewrap cannot create namespaces here")

README_DIFF = """diff --git a/README.md b/README.md
--- a/README.md
+++ b/README.md
@@ -1 +1 @@
-hello
+hello, agents
"""
SCRIPT = {
    "fix-readme": [
        {"tool_calls": [{"name": "list_tree", "arguments": {}}]},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}]},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "../../dome/worker.key"}}]},  # refused
        {"tool_calls": [{"name": "submit_patch", "arguments": {"diff": README_DIFF, "summary": "greet agents"}}]},
    ],
    "cli": [{"content": "written by an agent CLI"}],
    "greedy": [{"tool_calls": [{"name": "grep", "arguments": {"pattern": "hello"}}], "completion_tokens": 10**6}] * 50,
}

# runs inside a sandbox as a command worker: every way out it can think of, and a search for the key
PROBE = r'''
import base64, glob, json, os, socket, sys, time
sys.path.insert(0, %(root)r)
from registry import toolprofile as tp
from registry.canonical import digest_bytes
from registry.signing import SigningKey
out = {}
def attempt(name, fn):
    try:
        out[name] = {"ok": True, "result": fn()}
    except Exception as exc:
        out[name] = {"ok": False, "error": type(exc).__name__ + ": " + str(exc)}
attempt("direct", lambda: socket.create_connection(("127.0.0.1", %(port)d), timeout=3).close())
attempt("dns", lambda: socket.getaddrinfo(%(host)r, 443))
def via_gate(raw):
    s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(os.environ.get("DOME_EGRESS_SOCKET", "/dome/egress.sock"))
    s.sendall(raw); data = b""
    while True:
        c = s.recv(65536)
        if not c: break
        data += c
    return data.decode("utf-8", "replace")
attempt("connect", lambda: via_gate(b"CONNECT 127.0.0.1:%(port)d HTTP/1.1\r\nHost: 127.0.0.1:%(port)d\r\n\r\n"))
spawn = json.load(open("/dome/spawn.json"))
token = tp.envelope_to_token(spawn["grant"])
kid, seed = open("/dome/worker.key").read().split()[:2]
key = SigningKey(base64.b64decode(seed))
body = json.dumps({"model": %(model)r, "messages": [{"role": "user", "content": "hi"}]}).encode()
proof = tp.make_call_proof(key, jti=spawn["grant"] and json.loads(base64.b64decode(spawn["grant"]["payload"]))["jti"],
                           method="egress", args={"host": %(host)r, "path": "/v1/chat/completions",
                                                  "body_digest": digest_bytes(body)}, idempotency_key=None,
                           ts=int(time.time()), nonce=os.urandom(8).hex())
attempt("post_unallowed", lambda: via_gate(
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: %(host)s\r\nAuthorization: Bearer " + token.encode()
    + b"\r\ndome-call-proof: " + proof.encode() + b"\r\nContent-Length: " + str(len(body)).encode()
    + b"\r\nConnection: close\r\n\r\n" + body))
marker = ("sk-dome-" + "test-").encode()
hits = []
for root in ("/dome", "/tmp", os.getcwd()):
    for dirpath, dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            try:
                if marker in open(p, "rb").read():
                    hits.append(p)
            except OSError:
                pass
for p in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline"):
    try:
        if marker in open(p, "rb").read():
            hits.append(p)
    except OSError:
        pass
out["key_hits"] = hits
open("probe.json", "w").write(json.dumps(out, indent=1, sort_keys=True) + "\n")
'''


# stands in for an agent CLI (aider, a Node CLI): it only knows OPENAI_BASE_URL / OPENAI_API_KEY
CLI = """
import os, socket, openai
try:
    socket.create_connection(("127.0.0.1", int(os.environ["UPSTREAM_PORT"])), timeout=3)
    direct = "connected"
except OSError as exc:
    direct = type(exc).__name__
client = openai.OpenAI()
r = client.chat.completions.create(model=os.environ["DOME_AGENT_MODEL"],
                                   messages=[{"role": "user", "content": os.environ["DOME_AGENT_INSTRUCTIONS"]}])
open("CLI.md", "w").write(r.choices[0].message.content + "\\n" + "direct: " + direct + "\\n")
"""


def _agent_task(nid: str, script: str, **card_over) -> dict:
    return {"node_id": nid, "containers": [], "required_capabilities": ["read:repo", "write"],
            "required_outputs": ["patch_proposal"], "dependencies": [], "max_attempts": 1,
            "action_spec": {"intent": "agent", "params": {"card": card(**card_over),
                                                          "instructions": f"[script:{script}] do the task"}}}


@needs_bwrap
@pytest.mark.slow
def test_agents_through_the_gate_promote_refuse_and_meter(git_repo, ops_root, ledger_env, tmp_path, monkeypatch):
    ledger = ledger_env[0]
    llm = load_scripted_llm()(SCRIPT).start()
    key = "sk-dome-test-" + secrets.token_hex(20)
    monkeypatch.setenv("DOME_TEST_MODEL_KEY", key)
    egress = EgressConfig.parse({"routes": {HOST: {
        "upstream": f"http://127.0.0.1:{llm.port}", "key_env": "DOME_TEST_MODEL_KEY",
        "prices": {MODEL: {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 4.0}}}}})
    probe = PROBE % {"root": str(REPO_ROOT), "port": llm.port, "host": HOST, "model": MODEL}
    (tmp_path / "probe.py").write_text(probe)
    good = [_agent_task("fix-readme", "fix-readme"),
            _agent_task("cli-agent", "cli", cli={"argv": ["python3", "-c", CLI], "env": {"UPSTREAM_PORT": str(llm.port)}}),
            cmd_task("probe", "python3 - <<'EOF'\n" + probe + "\nEOF", max_attempts=1)]
    bad = [{**_agent_task("greedy", "greedy", budgets={"max_tokens": 8000}), "max_attempts": 2},
           _agent_task("wanderer", "fix-readme", endpoint={"host": "api.unlisted.example", "base_path": "/v1"})]
    sched = {"max_parallel": 2, "endgame_max_duplicates": 0}
    try:
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        _, out = run_queue(write_queue(tmp_path / "a", git_repo, good, scheduling=sched), ops_root, ledger_env,
                           sandbox="bwrap", egress=egress, finish=integration_finish)
        # a run whose agents fail integrates nothing (a failed node fails the run)
        _, out_bad = run_queue(write_queue(tmp_path / "b", git_repo, bad, scheduling=sched,
                                           promote_to="refs/heads/dome/out-b"), ops_root, ledger_env,
                               sandbox="bwrap", egress=egress, finish=integration_finish)
    finally:
        llm.stop()
    assert out.status == "promoted" and out_bad.status == "failed"
    ev = ledger.events(out.run_id) + ledger.events(out_bad.run_id)

    def ends(node):
        return [e.payload for e in ev if e.node_id == node and e.topic in (rs.TASK_COMPLETED, rs.TASK_FAILED)]

    # the agent read, was refused a path outside its checkout, proposed, and its patch was promoted
    done = ends("fix-readme")
    assert [d["outcome"] for d in done] == ["succeeded"], done
    assert done[0]["metrics"]["model_calls"] == 4
    assert git(git_repo, "show", f"{out.promoted_ref}:README.md") == "hello, agents"
    # the agent CLI in the same slot: its model traffic went shim -> gate; its own connection did not get out
    cli_md = git(git_repo, "show", f"{out.promoted_ref}:CLI.md").splitlines()
    assert cli_md[0] == "written by an agent CLI" and cli_md[1] in ("direct: PermissionError", "direct: ConnectionRefusedError")
    transcript = json.loads(ledger.blobs.get(done[0]["evidence"][0]["digest"]))
    tool_out = [m["content"] for m in transcript["messages"] if m["role"] == "tool"]
    assert "PATH_DENIED" in tool_out[2] and "README.md" in tool_out[0]
    # the greedy agent ran out of tokens: a typed error; its retry shared the node's budget and ran out too
    greedy = ends("greedy")
    assert [g["error"]["code"] for g in greedy] == ["BUDGET_EXHAUSTED", "BUDGET_EXHAUSTED"], greedy
    calls = [e for e in ev if e.topic == mt.CALL_TOPIC]
    greedy_tokens = sum(c.payload["tokens_in"] + c.payload["tokens_out"] for c in calls if c.node_id == "greedy")
    assert 0 < greedy_tokens <= 8000
    # the agent whose card names a host the coordinator does not route is refused
    assert [w["error"]["code"] for w in ends("wanderer")] == ["EGRESS_HOST_NOT_ALLOWED"]
    # one ledger event per model call; the upstream saw exactly those requests, each with the key
    assert len(calls) == len(llm.requests)
    assert all(r["headers"]["authorization"] == f"Bearer {key}" for r in llm.requests)
    assert {ledger.blobs.get(c.payload["request_digest"]) for c in calls} == {r["body"] for r in llm.requests}
    # the probe: no direct connection, no DNS, no tunnel, no host outside its grant, no key anywhere
    diff = next(ledger.blobs.get(e.payload["diff_ref"]) for e in ev
                if e.topic == rs.PATCH_SUBMITTED and e.node_id == "probe").decode()
    res = json.loads("".join(line[1:] + "\n" for line in diff.splitlines()
                             if line.startswith("+") and not line.startswith("+++")))
    assert not res["direct"]["ok"] and not res["dns"]["ok"], res
    assert res["connect"]["result"].startswith("HTTP/1.1 405") and "EGRESS_METHOD_NOT_ALLOWED" in res["connect"]["result"]
    assert "EGRESS_HOST_NOT_ALLOWED" in res["post_unallowed"]["result"], res
    assert res["key_hits"] == []
    # no key byte in the ledger, the blobs or any proposal
    stored = b"".join(p.read_bytes() for p in ops_root.rglob("*") if p.is_file())
    assert key.encode() not in stored and key[-16:].encode() not in stored
    assert ledger.verify(ledger_env[2]).ok
    # the report shows tokens and cost per attempt and per run, from the same events
    from coordinator.report.build import build_report

    rep = build_report(ledger, ops_root, out_bad.run_id, pictures=False)
    usage = rep.model.model_usage
    bad_calls = [c.payload for c in calls if c.node_id == "greedy"]
    assert usage["run"] == {"calls": len(bad_calls), "tokens_in": sum(c["tokens_in"] for c in bad_calls),
                            "tokens_out": sum(c["tokens_out"] for c in bad_calls),
                            "cost_micros": sum(c["cost_micros"] for c in bad_calls)}
    # both greedy attempts drew on one account (the retry used only what the first left); the wanderer made none
    assert [r["node_id"] for r in usage["attempts"]] == ["greedy", "greedy"]
    assert "Model usage" in rep.html and f"{usage['run']['cost_micros'] / 1e6:.6f}" in rep.html
