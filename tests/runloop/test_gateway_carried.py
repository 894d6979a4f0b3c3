"""Carried calls: an attempt's put_artifact and submit_patch travel inside its complete_task.

One request, three calls: each carried call is validated, authorised by the grant and by its
own call proof, charged, recorded and idempotent exactly as if it had come alone, so the
ledger of a one-request attempt matches that of a three-request attempt event for event, and
every refusal a lone call gets, a carried one gets too (real gateway, real SDK server, real
ledger, real grants; the proposal is built from a real git checkout)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coordinator import runstate as rs
from registry.errors import DomeError
from tests.conftest import git, make_repo
from tests.runloop.conftest import open_attempt, start_gateway
from worker_sdk.client import GatewayClient

RUN = "run-carried"


@pytest.fixture
def env(ledger_env, tmp_path: Path):
    ledger, signer, keyring = ledger_env
    repo = make_repo(tmp_path / "repo")
    base = git(repo, "rev-parse", "HEAD").strip()
    started = start_gateway(ledger, keyring, signer, tmp_path / "gw.sock", RUN, base)
    gw, writer, verifier, _ = started

    def attempt(neid: str, path: str = "out/a.txt", caps=("write",)) -> tuple[GatewayClient, dict, bytes, Any]:
        return open_attempt(started, signer, repo, RUN, neid, path=path, caps=caps)

    yield gw, writer, verifier, attempt, ledger
    gw.stop()


def _shape(ledger, neid: str) -> list[tuple[str, Any]]:
    """The attempt's events after dispatch and grant, with what identifies each (no ids or times)."""
    out = []
    for ev in ledger.events(RUN):
        if ev.node_execution_id != neid or ev.topic in (rs.TASK_DISPATCHED, "grant.issued"):
            continue
        p = ev.payload
        out.append((ev.topic, p.get("method"), p.get("outcome"), p.get("spent_jti"), p.get("family"),
                    p.get("cost_units"), p.get("media_type"), p.get("size"), "proposal" in p))
    return out


def _one_request(c: GatewayClient, proposal: dict, diff: bytes) -> dict:
    c.put_artifact_carried(diff, "text/x-diff", "patch.diff")
    pid = c.submit_patch_carried(proposal)
    return c.complete_task("succeeded", summary={"ok": True}, proposal_id=pid)


def test_one_request_records_what_three_requests_record(env):
    gw, writer, verifier, attempt, ledger = env
    c3, p3, d3, g3 = attempt("ne-thre")
    c3.put_artifact(d3, "text/x-diff", "patch.diff")
    c3.submit_patch(p3)
    c3.complete_task("succeeded", summary={"ok": True}, proposal_id=p3["proposal_id"])
    before = gw.calls
    c1, p1, d1, g1 = attempt("ne-once")
    done = _one_request(c1, p1, d1)
    assert gw.calls == before + 1  # one request
    assert [x["tool"] for x in done["carried"]] == ["put_artifact", "submit_patch"]
    assert done["carried"][1]["accepted"] is True and done["recorded"] is True
    assert _shape(ledger, "ne-once") == _shape(ledger, "ne-thre")  # same events, charges and spend
    assert verifier.usage(g1.payload["profile_id"]) | {"first_call_at": 0} == \
        verifier.usage(g3.payload["profile_id"]) | {"first_call_at": 0}
    assert writer.state.node("n-ne-once").succeeded
    assert c1.used == c3.used  # the client's own budget count is the same too


def test_a_retried_request_is_answered_from_the_idempotency_records(env):
    gw, _, _, attempt, ledger = env
    c, p, d, _ = attempt("ne-retry")
    c.put_artifact_carried(d, "text/x-diff", "patch.diff")
    c.submit_patch(p)  # carries the upload: two calls in one request
    n = len(ledger.events(RUN))
    again = c.call("submit_patch", {**c._submit_args(p), "idempotency_key": f"ne-retry:submit_patch:{p['diff_digest'][7:39]}",
                                    "carried": [{"tool": "put_artifact", "proof": None, "arguments": c._artifact_args(
                                        d, "text/x-diff", "patch.diff")}]})
    assert again["duplicate"] is True and again["carried"][0]["duplicate"] is True  # fresh proofs, same answers
    assert {e.topic for e in ledger.events(RUN)[n:]} == {"grant.call"}  # charged, nothing else recorded


def test_a_carried_call_needs_its_own_proof(env):
    """The request's proof covers the request; the carried call is refused without a proof of its own."""
    gw, _, _, attempt, ledger = env
    c, p, d, g = attempt("ne-proof")
    args = c._artifact_args(d, "text/x-diff", "patch.diff")
    genuine = c._proof
    request = dict(c._submit_args(p), carried=[{"tool": "put_artifact", "arguments": args, "proof": None}])
    n = len(ledger.events(RUN))
    bad = ("GRANT_PROOF_INVALID", "GRANT_PROOF_MISMATCH")  # a MAC over another call is just not valid
    for inner, codes in ((lambda a: None, ("GRANT_PROOF_MISSING",)),
                         (lambda a: genuine("put_artifact", {**a, "media_type": "text/plain"}), bad),
                         (lambda a: genuine("report_progress", a), bad)):
        c._proof = lambda name, a, inner=inner: genuine(name, a) if name == "submit_patch" else inner(a)
        with pytest.raises(DomeError) as ei:
            c._send("submit_patch", json.loads(json.dumps(request)))
        assert ei.value.code in codes
    assert [e.topic for e in ledger.events(RUN)[n:]] == ["grant.rejected"] * 3  # nothing stored, nothing charged
    c._proof = genuine
    assert c._send("submit_patch", json.loads(json.dumps(request)))["carried"][0]["duplicate"] is False


def test_a_carried_call_for_another_attempt_is_refused(env):
    gw, _, _, attempt, ledger = env
    c, p, d, _ = attempt("ne-mine")
    other, p2, d2, _ = attempt("ne-theirs", path="out/b.txt")
    args = other._artifact_args(d2, "text/x-diff", "patch.diff")  # the other attempt's neid
    with pytest.raises(DomeError) as ei:
        c.call("submit_patch", dict(c._submit_args(p), carried=[{"tool": "put_artifact", "arguments": args}]))
    assert ei.value.code in ("GRANT_WRONG_WAVE", "ATTEMPT_NOT_LIVE", "GRANT_BINDING_MISMATCH")
    assert not [e for e in ledger.events(RUN) if e.topic == rs.ARTIFACT_PUT and e.node_execution_id == "ne-theirs"]


def test_what_may_be_carried_is_closed(env):
    gw, _, _, attempt, ledger = env
    c, p, d, _ = attempt("ne-closed")
    n = len(ledger.events(RUN))
    bad = [
        [{"tool": "complete_task", "arguments": {}}],  # only the calls before this one
        [{"tool": "put_artifact", "arguments": {}, "extra": 1}],
        [{"tool": "put_artifact", "arguments": c._artifact_args(d, "text/x-diff", None)}] * 5,  # at most four
    ]
    for carried in bad:
        with pytest.raises(DomeError) as ei:
            c._send("submit_patch", dict(c._submit_args(p), carried=carried))
        assert ei.value.code == "INVALID_REQUEST"
    nested = {"tool": "submit_patch", "arguments": dict(c._submit_args(p), carried=[])}
    with pytest.raises(DomeError) as ei:
        c._send("complete_task", {"idempotency_key": "ne-closed:complete_task:final", "node_execution_id": "ne-closed",
                                  "outcome": "succeeded", "carried": [nested]})
    assert ei.value.code == "INVALID_REQUEST"  # a carried call carries nothing
    assert [e.topic for e in ledger.events(RUN)[n:]] == []


def test_a_refused_carried_call_answers_the_request_and_the_call_is_not_made(env):
    gw, writer, _, attempt, ledger = env
    c, p, d, _ = attempt("ne-denied", path=".git-not/x")
    p = {**p, "touched_files": [".git/config"]}
    c.put_artifact_carried(d, "text/x-diff", "patch.diff")
    c.submit_patch_carried(p)
    with pytest.raises(DomeError) as ei:
        c.complete_task("succeeded", summary={})
    assert ei.value.code in ("PROPOSAL_INVALID", "PATH_DENIED")
    topics = [e.topic for e in ledger.events(RUN) if e.node_execution_id == "ne-denied"]
    assert rs.ARTIFACT_PUT in topics and rs.PATCH_SUBMITTED not in topics and rs.TASK_COMPLETED not in topics
    c.complete_task("failed", error={"code": ei.value.code, "message": "m", "details": {}, "hints": [],
                                     "retry": "none"})  # the failure report goes alone and lands
    assert writer.state.node("n-ne-denied").attempts == 1


def test_budgets_count_carried_calls(env):
    gw, _, verifier, attempt, _ = env
    c, p, d, g = attempt("ne-budget")
    c.budgets["max_calls_by_method"] = {"put_artifact": 1}
    c.put_artifact_carried(d, "text/x-diff", "a.diff")
    with pytest.raises(DomeError) as ei:  # refused before anything is sent, as a lone call is
        c.put_artifact_carried(d + b"x", "text/x-diff", "b.diff")
    assert ei.value.code == "BUDGET_EXHAUSTED"
    c.close()  # what no call carried is sent alone
    assert verifier.usage(g.payload["profile_id"])["calls_total"] == 1


def test_more_than_a_request_carries_go_alone_first(env):
    gw, _, verifier, attempt, ledger = env
    c, p, d, g = attempt("ne-many")
    for i in range(5):
        c.put_artifact_carried(d + str(i).encode() if i else d, "text/x-diff", f"p{i}.diff")
    c.submit_patch_carried(p)
    c.complete_task("succeeded", summary={})  # six calls pending: too many to carry, sent alone, in order
    puts = [e.payload["name"] for e in ledger.events(RUN) if e.topic == rs.ARTIFACT_PUT and e.node_execution_id == "ne-many"]
    assert puts == [f"p{i}.diff" for i in range(5)]
    assert verifier.usage(g.payload["profile_id"])["calls_total"] == 7


def test_the_sdk_client_sees_carried_in_the_listed_schema(env):
    gw, _, _, attempt, _ = env
    c, _, _, _ = attempt("ne-list")
    tools = {t["name"]: t for t in c._rpc("tools/list", {})["tools"]}
    assert tools["complete_task"]["inputSchema"]["properties"]["carried"]["items"]["properties"]["tool"]["enum"] == \
        ["put_artifact", "submit_patch"]
    assert json.dumps(tools["submit_patch"]["inputSchema"]["properties"]["carried"]).count("put_artifact") == 1
