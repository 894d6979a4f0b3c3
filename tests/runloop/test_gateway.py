"""The worker gateway over MCP (real SDK server on a Unix socket, real ledger, real grants).

Driven both by the official MCP SDK client and by the worker's own client.
"""
from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path

import pytest

from coordinator import runstate as rs
from coordinator.gateway import auth as grants_io
from coordinator.gateway.dispatch import ToolDispatcher
from registry import toolprofile as tp
from registry.errors import DomeError
from registry.signing import SigningKey
from tests.runloop.conftest import start_gateway
from worker_sdk.client import BudgetExhausted, GatewayClient, OutOfProfile, WorkerKeyMismatch

RUN = "run-gw-test"
BASE = "a" * 40
TREE = "b" * 40


@pytest.fixture
def gateway(ledger_env, tmp_path: Path):
    ledger, signer, keyring = ledger_env
    gw, writer, verifier, attempts = start_gateway(ledger, keyring, signer, tmp_path / "gw.sock", RUN, BASE)

    class G:  # what the tests need of an issued grant (and its worker key, as the run loop delivers it)
        def __init__(self, g, key):
            self.token, self.profile, self.envelope, self.key = g.token, dict(g.payload), g.envelope, key

    def attempt(neid: str, caps=("write",), cnf: bool = True, node: str = "n1"):
        attempts[neid] = {"node_id": node, "wave_id": "w0001", "base_ref": BASE, "base_tree_hash": TREE,
                          "task": {"node_id": node}}
        writer.append(rs.TASK_DISPATCHED, {"node_execution_id": neid}, node_id=node, node_execution_id=neid)
        key = SigningKey.generate() if cnf else None
        g, issued = grants_io.issue(key=signer, run_id=RUN, wave_id="w0001", node_id=node, node_execution_id=neid,
                                    capabilities=list(caps), ttl_s=60, policy_id="default", seed=1,
                                    inputs_hash="sha256:" + "0" * 64,
                                    worker_public_key=key.public.raw if key else None)
        writer.append("grant.issued", issued, node_id=node, node_execution_id=neid)
        if key is not None:  # as the run loop does at attempt start: the key of the MAC call proofs
            verifier.bind_call_key(g.jti, key)
        return G(g, key)

    yield gw, writer, verifier, attempt, ledger
    gw.stop()


def client(gw, grant):
    return GatewayClient(token=grant.token, profile=grant.profile, socket=str(gw.socket_path), worker_key=grant.key)


def test_tools_list_shows_only_what_the_grant_allows_sdk_client(gateway):
    gw, _, _, attempt, _ = gateway
    import httpx2
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client

    async def names(token):
        transport = httpx2.AsyncHTTPTransport(uds=str(gw.socket_path))
        async with httpx2.AsyncClient(transport=transport, headers={"Authorization": f"Bearer {token}"}) as hc:
            async with Client(streamable_http_client("http://dome-gateway/mcp", http_client=hc),
                              mode="legacy", cache=None) as c:
                return sorted(t.name for t in (await c.list_tools()).tools)

    write = asyncio.run(names(attempt("ne-w1").token))
    read = asyncio.run(names(attempt("ne-r1", caps=("read",)).token))
    assert write == ["complete_task", "get_task", "put_artifact", "report_progress", "submit_patch"]
    assert read == ["complete_task", "get_task", "put_artifact", "report_progress"]  # + evidence + lifecycle
    assert "submit_patch" not in read


def test_out_of_profile_and_budget_refused_before_sending(gateway):
    gw, _, _, attempt, _ = gateway
    c = client(gw, attempt("ne-r2", caps=("read",)))
    before = gw.calls
    with pytest.raises(OutOfProfile):
        c.submit_patch({"diff_digest": "sha256:" + "0" * 64})
    assert gw.calls == before  # nothing reached the gateway
    c2 = client(gw, attempt("ne-b1"))
    c2.budgets = {"max_calls": 1}  # the client enforces what the grant says before sending
    c2.report_progress(0.1, "one")
    with pytest.raises(BudgetExhausted):
        c2.report_progress(0.2, "two")


def test_bad_grants_rejected_every_call(gateway):
    gw, _, authority, attempt, ledger = gateway
    g = attempt("ne-x1")
    env = dict(g.envelope)
    env["payload"] = base64.b64encode(base64.b64decode(env["payload"]).replace(b"ne-x1", b"ne-x2")).decode()
    from registry.toolprofile import envelope_to_token
    forged = GatewayClient.__new__(GatewayClient)
    c = client(gw, g)
    c.token = envelope_to_token(env)
    with pytest.raises(DomeError) as ei:
        c.report_progress(0.5)
    assert ei.value.code == "GRANT_SIGNATURE_INVALID"
    # revoked grant
    c = client(gw, g)
    c.report_progress(0.1)
    ledger.revoke(jti=g.profile["jti"], run_id=RUN, reason="test")
    with pytest.raises(DomeError) as ei:
        c.report_progress(0.2)
    assert ei.value.code == "GRANT_REVOKED"
    # a grant for another attempt cannot write for this one
    g2 = attempt("ne-x3")
    c3 = client(gw, g2)
    c3.neid = "ne-x1"
    with pytest.raises(DomeError) as ei:
        c3.report_progress(0.3)
    assert ei.value.code == "ATTEMPT_NOT_LIVE"
    # a grant for another wave is refused by the verifier's binding check
    ev = [e for e in ledger.events(RUN) if e.topic == "grant.rejected"]
    assert ev  # every rejection is one grant.rejected event
    assert forged is not None


def test_writes_are_idempotent_on_run_method_key(gateway):
    gw, writer, _, attempt, ledger = gateway
    c = client(gw, attempt("ne-i1"))
    args = {"idempotency_key": "ne-i1:report_progress:7", "node_execution_id": "ne-i1", "fraction": 0.5}
    r1 = c.call("report_progress", dict(args))
    r2 = c.call("report_progress", dict(args))
    assert r1["duplicate"] is False and r2["duplicate"] is True
    n = sum(1 for e in ledger.events(RUN) if e.topic == rs.TASK_PROGRESS
            and e.payload["idempotency_key"] == args["idempotency_key"])
    assert n == 1
    with pytest.raises(DomeError) as ei:
        c.call("report_progress", {**args, "fraction": 0.9})
    assert ei.value.code == "IDEMPOTENCY_CONFLICT"
    # put_artifact lands in the blob store, once
    d = c.put_artifact(b"hello", "text/plain")
    assert ledger.blobs.get(d) == b"hello"
    assert c.put_artifact(b"hello", "text/plain") == d


def test_closed_input_schemas_and_typed_errors(gateway):
    gw, _, _, attempt, _ = gateway
    c = client(gw, attempt("ne-s1"))
    with pytest.raises(DomeError) as ei:
        c.call("report_progress", {"idempotency_key": "ne-s1:x:1", "node_execution_id": "ne-s1",
                                   "fraction": 0.1, "shell": "rm -rf /"})
    assert ei.value.code == "INVALID_REQUEST"


def test_submit_patch_is_verified_and_complete_spends_the_grant(gateway):
    gw, writer, _, attempt, ledger = gateway
    g = attempt("ne-p1")
    c = client(gw, g)
    diff = b"not a diff"
    ref = c.put_artifact(diff, "text/x-diff")
    proposal = {"artifact_kind": "dome.patch_proposal/v1", "version": "1.0.0", "object_id": "pp-1",
                "run_id": RUN, "created_at": "2026-01-01T00:00:00Z", "producer": "t", "proposal_id": "pp-1",
                "base_ref": BASE, "base_tree_hash": TREE, "diff_canonicalization": "git-binary-full-index/v1",
                "diff_digest": "sha256:" + "0" * 64, "diff_ref": ref, "touched_files": [".git/config"],
                "intent_tags": [], "risk": {"class": "low"}, "declared_constraints": {},
                "worker_run_meta": {"tool_profile_id": "tp", "run_id": RUN, "wave_id": "w0001"}}
    with pytest.raises(DomeError) as ei:
        c.submit_patch(proposal)
    assert ei.value.code in ("PROPOSAL_INVALID", "DIFF_DIGEST_MISMATCH")
    with pytest.raises(DomeError) as ei:
        c.submit_patch({**proposal, "base_ref": "c" * 40})
    assert ei.value.code == "BASE_MISMATCH"
    c.complete_task("succeeded", summary={"ok": True})
    with pytest.raises(DomeError) as ei:
        c.report_progress(1.0, "after the end")
    assert ei.value.code == "GRANT_REPLAYED"  # the terminal write spent the single-use grant
    assert writer.state.node("n1").succeeded


# ---------------------------------------------------------------- sender-constrained grants (cnf + call proof)
def _progress_args(neid: str, n: int, fraction: float = 0.5) -> dict:
    return {"idempotency_key": f"{neid}:report_progress:{n}", "node_execution_id": neid, "fraction": fraction}


def _rejected_only(ledger, fn, code: str) -> None:
    """fn() is refused with `code`, and its one ledger trace is a grant.rejected event with that code."""
    before = len(ledger.events(RUN))
    with pytest.raises(DomeError) as ei:
        fn()
    assert ei.value.code == code
    new = ledger.events(RUN)[before:]
    assert [e.topic for e in new] == ["grant.rejected"], [e.topic for e in new]
    assert new[0].payload["code"] == code


def test_cnf_grant_needs_a_proof_by_the_attempt_key_over_this_call(gateway):
    gw, _, _, attempt, ledger = gateway
    g = attempt("ne-c1")
    assert g.profile["cnf"]["kid"] == g.key.kid
    c = client(gw, g)
    assert c.call("report_progress", _progress_args("ne-c1", 1))["duplicate"] is False  # the genuine worker
    # the stolen token alone: no proof
    thief = GatewayClient(token=g.token, profile={k: v for k, v in g.profile.items() if k != "cnf"},
                          socket=str(gw.socket_path))
    _rejected_only(ledger, lambda: thief.call("report_progress", _progress_args("ne-c1", 2)), "GRANT_PROOF_MISSING")
    # the token with a proof signed by another key
    other = SigningKey.generate()
    thief._worker_key = other
    _rejected_only(ledger, lambda: thief.call("report_progress", _progress_args("ne-c1", 3)), "GRANT_PROOF_INVALID")
    # a genuine proof, but over other arguments (a captured proof put on a forged call)
    now = int(time.time())
    real = lambda a, ts=None, key=g.key: tp.make_call_proof(  # noqa: E731
        key, jti=g.profile["jti"], method="report_progress", args=a, idempotency_key=a["idempotency_key"],
        ts=now if ts is None else ts, nonce="n")
    args4 = _progress_args("ne-c1", 4)
    thief._proof = lambda name, a: real({**a, "fraction": 0.99})
    _rejected_only(ledger, lambda: thief.call("report_progress", args4), "GRANT_PROOF_MISMATCH")
    # a genuine proof of exactly this call, but stale
    thief._proof = lambda name, a: real(a, ts=now - 600)
    _rejected_only(ledger, lambda: thief.call("report_progress", _progress_args("ne-c1", 5)), "GRANT_PROOF_STALE")
    # a captured proof replayed verbatim
    args6 = _progress_args("ne-c1", 6)
    captured = real(args6)
    thief._proof = lambda name, a: captured
    thief._worker_key = g.key
    assert thief.call("report_progress", dict(args6))["duplicate"] is False
    _rejected_only(ledger, lambda: thief.call("report_progress", dict(args6)), "GRANT_PROOF_REPLAYED")
    # the genuine worker goes on: a retried call (same key) gets a fresh proof and the idempotent answer
    assert c.call("report_progress", dict(args6))["duplicate"] is True
    c.complete_task("succeeded", summary={"ok": True})
    # the ledger holds the public key (cnf) but never the private key or a proof
    dump = json.dumps([e.payload for e in ledger.events(RUN)])
    assert base64.b64encode(g.key.seed).decode() not in dump and g.key.seed.hex() not in dump
    assert captured not in dump


def test_client_refuses_a_cnf_grant_without_its_key(gateway):
    gw, _, _, attempt, _ = gateway
    g = attempt("ne-c2")
    with pytest.raises(WorkerKeyMismatch):
        GatewayClient(token=g.token, profile=g.profile, socket=str(gw.socket_path))
    with pytest.raises(WorkerKeyMismatch):
        GatewayClient(token=g.token, profile=g.profile, socket=str(gw.socket_path), worker_key=SigningKey.generate())
    bearer = attempt("ne-c3", cnf=False)  # a bearer grant still works without a key
    assert "cnf" not in bearer.profile
    assert client(gw, bearer).call("report_progress", _progress_args("ne-c3", 1))["duplicate"] is False


def _front_door_error(ops_root: Path, tool: str, args: dict) -> dict:
    """The ErrorObject `dome mcp` answers for one call (real SDK client, in-process host)."""
    from mcp import Client

    from coordinator.mcp.catalog import default_specs
    from coordinator.mcp.dispatch import ToolHost
    from coordinator.mcp.server import build_server

    async def go() -> dict:
        host = ToolHost(ops_root=ops_root, specs=default_specs(include_test=False))
        async with Client(build_server(host), mode="legacy", cache=None) as c:
            res = await c.call_tool(tool, args)
            assert res.is_error
            return dict(res.structured_content)

    return asyncio.run(go())


# one malformed call of each kind, spelled for a tool of each door (same fault, same place in the request)
MALFORMED = {
    "unknown_field": ({"job_id": "job_1", "shell": "rm -rf /"},
                      {"fraction": 0.1, "message": "m", "shell": "rm -rf /"}),
    "wrong_type": ({"job_id": 7}, {"fraction": "most"}),
    "missing_required": ({}, {"fraction": None}),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_one_fault_gets_one_code_through_both_doors(gateway, tmp_path, kind):
    """The worker gateway and the MCP front door share one dispatch core: the same malformed call
    gets the same code, the same named field and the same retry hint through either door."""
    gw, _, _, attempt, _ = gateway
    front_args, gw_fields = MALFORMED[kind]
    c = client(gw, attempt("ne-m1"))
    gw_args = {"idempotency_key": "ne-m1:x:1", "node_execution_id": "ne-m1", **gw_fields}
    if kind == "missing_required":
        del gw_args["fraction"]
    with pytest.raises(DomeError) as ei:
        c.call("report_progress", gw_args)
    back = ei.value.to_object()
    front = _front_door_error(tmp_path / "ops", "poll", front_args)
    assert back["code"] == front["code"] == "INVALID_REQUEST", (back, front)
    assert back["retry"] == front["retry"] == "none"
    assert sorted(back["details"]) == sorted(front["details"])
    if kind == "unknown_field":
        assert back["details"]["unknown_fields"] == front["details"]["unknown_fields"] == ["shell"]
    else:
        field = {"wrong_type": ("fraction", "job_id"), "missing_required": ("fraction", "job_id")}[kind]
        assert (back["details"]["field"], front["details"]["field"]) == field
        assert repr(field[0]) in back["message"] or field[0] in back["message"]


def test_an_unexpected_exception_is_internal_error_through_both_doors(tmp_path):
    from coordinator.gateway.dispatch import ToolSpec

    def boom(args, ctx):
        raise RuntimeError("secret backend detail")

    dispatcher = ToolDispatcher([ToolSpec("boom", "fails", {"type": "object", "additionalProperties": False}, boom)])
    out = dispatcher.call("boom", {})
    assert not out.ok and out.result["code"] == "INTERNAL_ERROR"
    assert dispatcher.stats.methods["boom"].errors == 1  # the core's call stats, as the front door keeps them
    assert "secret" not in json.dumps(out.result)

    async def front_boom(args, ctx):
        raise RuntimeError("secret backend detail")

    from mcp import Client

    from coordinator.mcp.catalog import default_specs
    from coordinator.mcp.dispatch import ToolHost
    from coordinator.mcp.server import build_server

    async def go() -> dict:
        host = ToolHost(ops_root=tmp_path / "ops", specs=default_specs(include_test=False),
                        handlers={"health": front_boom})
        async with Client(build_server(host), mode="legacy", cache=None) as c:
            res = await c.call_tool("health", {})
            return dict(res.structured_content)

    front = asyncio.run(go())
    assert front["code"] == out.result["code"] == "INTERNAL_ERROR"
    assert "secret" not in json.dumps(front)


def test_get_task_hands_a_retried_attempt_what_earlier_attempts_of_its_node_put_under_resume(gateway):
    gw, _, _, attempt, _ = gateway
    first = client(gw, attempt("ne-r1"))
    first.put_artifact(b"tile one", "application/json", "resume/litho.tile/T_0_0")
    first.put_artifact(b"not for resuming", "text/plain", "notes.txt")
    client(gw, attempt("ne-o1", node="n2")).put_artifact(b"another node", "application/json", "resume/litho.tile/T_0_0")
    assert "resume" not in first.call("get_task", {"node_execution_id": "ne-r1"})  # not its own
    retry = client(gw, attempt("ne-r2"))
    got = retry.call("get_task", {"node_execution_id": "ne-r2"})
    assert [(r["name"], r["node_execution_id"]) for r in got["resume"]] == [("resume/litho.tile/T_0_0", "ne-r1")]
    assert base64.b64decode(got["resume"][0]["content_b64"]) == b"tile one"
    assert "resume" not in client(gw, attempt("ne-x1", node="n3")).call("get_task", {"node_execution_id": "ne-x1"})
