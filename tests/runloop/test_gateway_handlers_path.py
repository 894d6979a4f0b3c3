"""The gateway handlers' path as a task's request takes it: the carrier's call proof covers the
carried arguments as they were sent, the records it leaves hold canonical payloads and
verify, and a diff stored in the same request is not read back from disk (real gateway, SDK
server, SQLite ledger, grants and proofs)."""
from __future__ import annotations

import json

import pytest

from coordinator import runstate as rs
from registry.canonical import canonical_json
from registry.errors import DomeError
from tests.attacks import attack
from tests.runloop.test_gateway_carried import RUN, env  # noqa: F401 - the carried-call fixture


@attack("call-proof-forgery")
def test_a_carriers_proof_over_other_carried_arguments_is_refused(env):
    """The worker's proof for complete_task was made over one proposal; the request carries
    another, with a fresh proof of its own for the carried call. The carried call passes its own
    check, and the carrier must still be refused: its proof is not over what was sent."""
    gw, writer, _, attempt, ledger = env
    c, p, d, _ = attempt("ne-swap")
    signed_over = {**p, "summary": "what the proof was made over"}
    genuine = c._proof

    def proof(name, args):
        if name != "complete_task":
            return genuine(name, args)
        seen = json.loads(json.dumps(args))
        seen["carried"][1]["arguments"]["proposal"] = signed_over
        return genuine(name, seen)
    c._proof = proof
    c.put_artifact_carried(d, "text/x-diff", "patch.diff")
    pid = c.submit_patch_carried(p)
    n = len(ledger.events(RUN))
    with pytest.raises(DomeError) as ei:
        c.complete_task("succeeded", summary={}, proposal_id=pid)
    assert ei.value.code in ("GRANT_PROOF_INVALID", "GRANT_PROOF_MISMATCH")
    topics = [e.topic for e in ledger.events(RUN)[n:]]
    assert rs.TASK_COMPLETED not in topics and "grant.rejected" in topics
    assert topics.count(rs.PATCH_SUBMITTED) == 1  # the carried calls stand, as separate requests would
    c._proof = genuine


def test_the_records_of_a_request_hold_canonical_payload_bytes(env):
    """Each record's bytes hold its payload's canonical form, and the chain verifies."""
    gw, writer, _, attempt, ledger = env
    c, p, d, _ = attempt("ne-bytes")
    c.put_artifact_carried(d, "text/x-diff", "patch.diff")
    pid = c.submit_patch_carried(p)
    c.complete_task("succeeded", summary={"ok": True}, proposal_id=pid)
    mine = [e for e in ledger.events(RUN) if e.node_execution_id == "ne-bytes"]
    submitted = next(e for e in mine if e.topic == rs.PATCH_SUBMITTED)
    assert submitted.payload["proposal"] == p
    for e in mine:
        assert canonical_json(e.payload) in e.record_bytes
    assert ledger.verify().ok


def test_a_diff_stored_in_the_same_request_is_not_read_back_and_others_are(env, monkeypatch):
    """submit_patch takes the diff its request's put_artifact just stored from memory (its digest
    was computed from those bytes); a diff stored earlier is read from the blob store, which
    checks its digest: a blob changed on disk is still refused."""
    gw, _, _, attempt, ledger = env
    backend = gw.dispatcher.specs["put_artifact"].handler.args[0]
    reads: list[str] = []
    real_get = backend.blobs.get
    monkeypatch.setattr(backend.blobs, "get", lambda digest: reads.append(digest) or real_get(digest))
    c, p, d, _ = attempt("ne-fresh")
    c.put_artifact_carried(d, "text/x-diff", "patch.diff")
    c.submit_patch(p)
    assert reads == [] and p["diff_ref"] not in backend.fresh  # taken once
    c2, p2, d2, _ = attempt("ne-stale", path="out/b.txt")
    c2.put_artifact(d2, "text/x-diff", "patch.diff")
    backend.fresh.clear()  # as after other requests
    path = backend.blobs.path(p2["diff_ref"])
    path.chmod(0o644)
    path.write_bytes(d2 + b"tampered\n")
    with pytest.raises(DomeError) as ei:
        c2.submit_patch(p2)
    assert reads == [p2["diff_ref"]] and ei.value.code == "BLOB_DIGEST_MISMATCH"
