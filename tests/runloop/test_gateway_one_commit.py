"""One durable commit per gateway request: a request's calls (the carried ones and the final
one) are savepoints of one ledger transaction, committed once, before the answer.

Each call keeps its own checks, charge, records and idempotency record, and a refused call k
leaves exactly what k separate commits left: calls 1..k-1, call k's "failed" charge (or its
rejection), nothing of call k's own effects (real gateway, real SDK server, real SQLite
ledger, real grants and proofs)."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from coordinator import runstate as rs
from coordinator.grants import GrantVerifier
from coordinator.keys import load_keyring
from ledger import Ledger
from ledger.crashpoint import ENV, EXIT_STATUS
from registry.errors import DomeError
from tests.conftest import REPO_ROOT
from tests.runloop.test_gateway_carried import RUN, _shape, env  # noqa: F401 - the carried-call fixture
from tests.runloop.test_run_reads import Commits


def _request(c, proposal: dict, diff: bytes) -> dict[str, Any]:
    """A task's whole request: complete_task carrying put_artifact and submit_patch."""
    return {"idempotency_key": c.key("complete_task", "final"), "node_execution_id": c.neid,
            "outcome": "succeeded", "summary": {"ok": True}, "metrics": {}, "evidence": [],
            "proposal_id": proposal["proposal_id"], "error": None,
            "carried": [{"tool": "put_artifact", "proof": None,
                         "arguments": c._artifact_args(diff, "text/x-diff", "patch.diff")},
                        {"tool": "submit_patch", "proof": None, "arguments": c._submit_args(proposal)}]}


def _send(c, request: dict) -> dict:
    return c._send("complete_task", json.loads(json.dumps(request)))  # fresh proofs for each call


def _fresh_usage(ledger, keyring, profile_id: str) -> dict:
    """The budget a restarted coordinator derives from the ledger alone."""
    v = GrantVerifier(keyring, ledger)
    v._ensure_run(RUN)
    return v.usage(profile_id)


@pytest.fixture
def commits(env):
    ledger = env[4]
    seen = Commits()
    ledger._crash = seen
    yield seen
    ledger._crash = None


def _fault_after(gw, tool: str) -> list:
    """Make `tool`'s handler fail after it made its writes (a fault inside the call)."""
    spec = gw.dispatcher.specs[tool]
    ran: list = []

    def handler(args, call):
        spec.handler(args, call)
        ran.append(tool)
        raise RuntimeError("the handler failed after its writes")

    gw.dispatcher.specs[tool] = dataclasses.replace(spec, handler=handler)
    return ran


def _send_failing_at(gw, c, proposal: dict, diff: bytes, tool: str) -> tuple[dict, Any]:
    """Send the attempt's whole request with `tool` failing after its writes: the request is
    refused (INTERNAL_ERROR) with `tool` the last call run. Returns the request and the tool's
    own spec, for `_restore`."""
    spec = gw.dispatcher.specs[tool]
    ran = _fault_after(gw, tool)
    request = _request(c, proposal, diff)
    with pytest.raises(DomeError) as ei:
        _send(c, request)
    assert ei.value.code == "INTERNAL_ERROR" and ran == [tool]
    return request, spec


def _restore(gw, tool: str, spec) -> None:
    gw.dispatcher.specs[tool] = spec


def test_a_task_s_request_commits_once_and_records_what_one_commit_per_call_records(env, commits):
    gw, writer, verifier, attempt, ledger = env
    gw.one_commit = False
    c3, p3, d3, g3 = attempt("ne-percall")
    n = len(commits.seen)
    _send(c3, _request(c3, p3, d3))
    assert len(commits.seen) - n == 3  # the baseline: one durable transaction per call
    gw.one_commit = True
    c1, p1, d1, g1 = attempt("ne-onecomm")
    n = len(commits.seen)
    done = _send(c1, _request(c1, p1, d1))
    assert done["recorded"] is True and [x["tool"] for x in done["carried"]] == ["put_artifact", "submit_patch"]
    assert len(commits.seen) - n == 1
    assert sorted(commits.seen[-1]) == sorted(["grant.call"] * 3 + [rs.ARTIFACT_PUT, rs.PATCH_SUBMITTED,
                                                                    rs.TASK_COMPLETED])
    assert _shape(ledger, "ne-onecomm") == _shape(ledger, "ne-percall")
    used = verifier.usage(g1.payload["profile_id"])
    assert used | {"first_call_at": 0} == verifier.usage(g3.payload["profile_id"]) | {"first_call_at": 0}
    assert _fresh_usage(ledger, verifier.keyring, g1.payload["profile_id"]) | {"first_call_at": 0} == \
        used | {"first_call_at": 0}
    assert writer.state.node("n-ne-onecomm").succeeded
    assert rs.fold(ledger.events(RUN)) == writer.state  # the run state is the ledger's, record for record


@pytest.mark.parametrize("one_commit", [False, True])
def test_a_refused_call_k_leaves_calls_before_it_its_failed_charge_and_none_of_its_writes(env, commits,
                                                                                           one_commit):
    """submit_patch (call 2) is refused by its handler: put_artifact stays, submit_patch is
    charged "failed" and records nothing, complete_task is not made; the same with one commit
    per request as with one per call."""
    gw, writer, verifier, attempt, ledger = env
    gw.one_commit = one_commit
    neid = f"ne-refused-{int(one_commit)}"
    c, p, d, g = attempt(neid, path=f"out/{neid}.txt")
    p = {**p, "touched_files": [".git/config"]}
    n = len(commits.seen)
    with pytest.raises(DomeError) as ei:
        _send(c, _request(c, p, d))
    assert ei.value.code in ("PROPOSAL_INVALID", "PATH_DENIED")
    assert len(commits.seen) - n == (1 if one_commit else 2)
    mine = [e for e in ledger.events(RUN) if e.node_execution_id == neid and e.topic != "grant.issued"]
    assert [(e.topic, e.payload.get("method"), e.payload.get("outcome")) for e in mine[1:]] == [
        ("grant.call", "put_artifact", "ok"), (rs.ARTIFACT_PUT, "put_artifact", None),
        ("grant.call", "submit_patch", "failed")]
    pid = g.payload["profile_id"]
    assert verifier.usage(pid)["calls_total"] == 2 == _fresh_usage(ledger, verifier.keyring, pid)["calls_total"]
    assert rs.fold(ledger.events(RUN)) == writer.state


def test_a_refused_grant_check_at_call_k_records_its_rejection_beside_the_calls_before_it(env, commits):
    gw, writer, verifier, attempt, ledger = env
    c, p, d, g = attempt("ne-badproof")
    genuine = c._proof
    c._proof = lambda name, a: genuine(name, a) if name != "submit_patch" else genuine("report_progress", a)
    n = len(commits.seen)
    with pytest.raises(DomeError) as ei:
        _send(c, _request(c, p, d))
    assert ei.value.code in ("GRANT_PROOF_INVALID", "GRANT_PROOF_MISMATCH")
    assert len(commits.seen) - n == 1
    topics = [e.topic for e in ledger.events(RUN) if e.node_execution_id == "ne-badproof"]
    assert topics[-3:] == ["grant.call", rs.ARTIFACT_PUT, "grant.rejected"]  # call 2 not charged, call 3 not made
    assert verifier.usage(g.payload["profile_id"])["calls_total"] == 1
    c._proof = genuine
    done = _send(c, _request(c, p, d))  # the whole request again: call 1 answered from its record
    assert done["carried"][0]["duplicate"] is True and done["carried"][1]["duplicate"] is False
    assert writer.state.node("n-ne-badproof").succeeded


def test_a_final_call_that_fails_after_its_writes_leaves_no_spend_no_record_and_no_idempotency_record(env):
    """Adversarial: complete_task spends the single-use grant, records task.completed and its
    idempotency record, then fails. None of that may commit with the calls before it: the
    grant is unspent (durably and in memory), so the very same request, replayed whole,
    completes the task."""
    gw, writer, verifier, attempt, ledger = env
    c, p, d, g = attempt("ne-fault")
    request, spec = _send_failing_at(gw, c, p, d, "complete_task")
    mine = [e for e in ledger.events(RUN) if e.node_execution_id == "ne-fault"]
    assert rs.TASK_COMPLETED not in [e.topic for e in mine]
    assert [e.payload["spent_jti"] for e in mine if e.topic == "grant.call"] == [False, False, False]
    assert [e.payload["outcome"] for e in mine if e.topic == "grant.call"] == ["ok", "ok", "failed"]
    with ledger.transaction() as tx:
        assert not tx.is_spent(g.jti)
        assert tx.idempotency_get(RUN, "complete_task", request["idempotency_key"]) is None
        assert tx.idempotency_get(RUN, "submit_patch", request["carried"][1]["arguments"]["idempotency_key"])
    assert g.jti not in verifier._spent
    _restore(gw, "complete_task", spec)
    done = _send(c, request)  # the whole request, replayed: the carried calls are duplicates now
    assert [x["duplicate"] for x in done["carried"]] == [True, True] and done["duplicate"] is False
    assert writer.state.node("n-ne-fault").succeeded and g.jti in verifier._spent
    assert rs.fold(ledger.events(RUN)) == writer.state


def test_a_carried_call_that_fails_leaves_no_record_and_its_key_stays_free(env):
    """Adversarial: put_artifact whose content does not match expected_digest stores its blob,
    then is refused: no artifact.put, no idempotency record, so the same key with the right
    digest is a fresh call, not IDEMPOTENCY_CONFLICT."""
    gw, writer, verifier, attempt, ledger = env
    c, p, d, g = attempt("ne-digest")
    request = _request(c, p, d)
    good = request["carried"][0]["arguments"]["expected_digest"]
    request["carried"][0]["arguments"]["expected_digest"] = "sha256:" + "0" * 64
    with pytest.raises(DomeError) as ei:
        _send(c, request)
    assert ei.value.code == "DIGEST_MISMATCH"
    mine = [e.topic for e in ledger.events(RUN) if e.node_execution_id == "ne-digest"]
    assert rs.ARTIFACT_PUT not in mine and mine[-1] == "grant.call"
    request["carried"][0]["arguments"]["expected_digest"] = good
    done = _send(c, request)
    assert [x["duplicate"] for x in done["carried"]] == [False, False]
    assert writer.state.node("n-ne-digest").succeeded



def test_a_carried_call_that_fails_after_its_writes_leaves_none_of_them(env):
    """Adversarial: the carried put_artifact writes its artifact.put and idempotency record,
    then fails: both roll back with its savepoint (its failed charge stays), the calls after
    it are not made, and the same request replayed is a fresh call, not a duplicate."""
    gw, writer, verifier, attempt, ledger = env
    c, p, d, g = attempt("ne-putfault")
    request, spec = _send_failing_at(gw, c, p, d, "put_artifact")
    mine = [e for e in ledger.events(RUN) if e.node_execution_id == "ne-putfault"]
    assert [(e.topic, e.payload.get("outcome")) for e in mine if e.topic != "grant.issued"][1:] == [
        ("grant.call", "failed")]
    with ledger.transaction() as tx:
        assert tx.idempotency_get(RUN, "put_artifact", request["carried"][0]["arguments"]["idempotency_key"]) is None
    assert rs.fold(ledger.events(RUN)) == writer.state
    _restore(gw, "put_artifact", spec)
    done = _send(c, request)
    assert [x["duplicate"] for x in done["carried"]] == [False, False]
    assert writer.state.node("n-ne-putfault").succeeded

# ---- crashes: kill the coordinator between a request's calls, before and after its commit -------

@pytest.mark.parametrize("where,kept", [("between", 0), ("before_commit", 0), ("after_commit", 3)])
def test_a_crash_inside_a_request_leaves_all_of_it_or_none_and_budgets_exact(tmp_path, where, kept):
    """A crash before the request's commit leaves none of its calls (none was answered); one right
    after it leaves all three, charged and spent. Either way the budget a restarted coordinator
    derives from the ledger is exactly the charges stored, and the chain verifies."""
    ops = tmp_path / "ops"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    if where == "after_commit":
        env[ENV] = "task.completed"
    r = subprocess.run([sys.executable, "-m", "tests.runloop.gateway_crash_child", str(ops), str(tmp_path),
                        "none" if where == "after_commit" else where],
                       cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == EXIT_STATUS, r.stderr[-2000:]
    assert "answered" not in r.stdout  # killed before the answer in every case
    ledger = Ledger.open(None, ops)
    try:
        evs = [e for e in ledger.events("run-crash") if e.node_execution_id == "ne-crash"]
        grant = next(e for e in evs if e.topic == "grant.issued").payload["profile"]
        charges = [e for e in evs if e.topic == "grant.call"]
        writes = [e.topic for e in evs if e.topic in (rs.ARTIFACT_PUT, rs.PATCH_SUBMITTED, rs.TASK_COMPLETED)]
        assert len(charges) == kept and len(writes) == kept
        fresh = GrantVerifier(load_keyring(ops), ledger)
        fresh._ensure_run("run-crash")
        assert fresh.usage(grant["profile_id"])["calls_total"] == kept
        with ledger.transaction() as tx:
            assert tx.is_spent(grant["jti"]) is (kept == 3)
            assert (tx.idempotency_get("run-crash", "put_artifact",
                                       "ne-crash:put_artifact:" + writes_key(ledger, kept)) is not None) is (kept == 3)
        assert ledger.verify(load_keyring(ops)).ok
    finally:
        ledger.close()


def writes_key(ledger, kept: int) -> str:
    """The put_artifact idempotency key's suffix (the diff's digest), read from the stored record."""
    if not kept:
        return "-"
    put = next(e for e in ledger.events("run-crash") if e.topic == rs.ARTIFACT_PUT)
    return put.payload["digest"][7:39]
