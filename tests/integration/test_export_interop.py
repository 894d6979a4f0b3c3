"""The exported DSSE envelopes and in-toto statements, checked by independent
implementations from PyPI (securesystemslib's DSSE Envelope and Ed25519 key,
in-toto-attestation's Statement v1), never by dome's own code: a third party
with only ops/keys/*.pub and ops/runs/<run_id>/ can check what dome hands out."""
from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from google.protobuf import json_format
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey

from tests.integration.test_verify_exports import finished_run, promoted_run  # noqa: F401 - module fixtures


def _keys(ops: Path) -> list[SSlibKey]:
    """ops/keys/*.pub ("<kid> <base64 raw Ed25519 key>") as securesystemslib keys."""
    out = []
    for path in sorted((ops / "keys").glob("*.pub")):
        kid, raw = path.read_text().split()[:2]
        out.append(SSlibKey(kid, "ed25519", "ed25519", {"public": base64.b64decode(raw).hex()}))
    assert out
    return out


def _verify(env: dict, keys: list[SSlibKey]) -> bytes:
    envelope = Envelope.from_dict(env)
    envelope.verify(keys, 1)  # raises VerificationError unless a key's signature verifies
    return envelope.payload


@pytest.mark.parametrize("which", ["finished_run", "promoted_run"])
def test_intoto_statements_verify_with_securesystemslib_and_in_toto_attestation(request, which: str) -> None:
    _, ops, run_id = request.getfixturevalue(which)
    keys = _keys(ops)
    pdir = ops / "runs" / run_id / "promotion"
    decision = json.loads((pdir / "promotion.decision.json").read_text())
    lines = (pdir / "evidence.intoto.jsonl").read_text().splitlines()
    assert len(lines) == len(decision["evidence_refs"]) + 1
    predicates = []
    for line in lines:
        env = json.loads(line)
        assert env["payloadType"] == "application/vnd.in-toto+json"
        payload = _verify(env, keys)
        stmt = Statement.copy_from_pb(json_format.Parse(payload, statement_pb2.Statement()))
        stmt.validate()  # type, subjects each with a digest, predicate type, predicate
        assert stmt.pb.type == "https://in-toto.io/Statement/v1"
        predicates.append(json.loads(payload)["predicate"])
    # the last statement is the decision itself; the others are the evidence it references
    assert predicates[-1] == decision
    digests = sorted(r["digest"] for r in decision["evidence_refs"])
    assert sorted(p["payload_digest"] for p in predicates[:-1]) == digests
    # and a changed statement no longer verifies
    env = json.loads(lines[0])
    stmt = json.loads(base64.b64decode(env["payload"]))
    stmt["predicate"]["artifact_kind"] = "dome.forged/v1"
    env["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()
    with pytest.raises(VerificationError):
        _verify(env, keys)


def test_exported_events_form_a_signed_hash_chain_checked_independently(promoted_run) -> None:
    """Each events/event.N.json carries its record's exact bytes as a DSSE payload:
    sha256 of them is record_digest, the next record names it as prev_digest,
    and every signed record verifies with securesystemslib."""
    _, ops, run_id = promoted_run
    keys = _keys(ops)
    files = sorted((ops / "runs" / run_id / "events").glob("event.*.json"),
                   key=lambda p: int(p.name.split(".")[1]))
    prev = None
    signed = 0
    for n, path in enumerate(files, start=1):
        exported = json.loads(path.read_text())
        env = exported["dsse"]
        raw = base64.b64decode(env["payload"])
        record = json.loads(raw)
        assert record["sequence"] == n and record["prev_digest"] == prev, path.name
        assert "sha256:" + hashlib.sha256(raw).hexdigest() == exported["record_digest"]
        assert record["payload"] == exported["payload"] and record["topic"] == exported["topic"]
        if env["signatures"]:
            _verify(env, keys)
            signed += 1
        prev = exported["record_digest"]
    topics = [json.loads(p.read_text())["topic"] for p in files]
    assert topics[0] == "run.started" and topics[-1] == "run.finished"
    assert signed >= 2  # run.started, run.finished (and every decision) are signed
