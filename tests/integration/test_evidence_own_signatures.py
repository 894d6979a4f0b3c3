"""verify_artifact answers from the signatures this process made (Ed25519 signing is
deterministic, so re-verifying one cannot fail) and verifies everything else in
full: a changed body, a re-digested body, another key or a signature made
elsewhere is still checked by the curve and refused when wrong."""
from __future__ import annotations

import pytest

from coordinator.integration import evidence
from coordinator.integration.evidence import body_of, sign_artifact, verify_artifact
from registry.canonical import digest_json
from registry.errors import SignatureError
from registry.signing import Keyring, PublicKey, SigningKey


@pytest.fixture
def curve_calls(monkeypatch) -> list[bytes]:
    calls: list[bytes] = []
    real = PublicKey.verify_pae

    def counted(self, payload_type, payload, signature):
        calls.append(payload)
        return real(self, payload_type, payload, signature)

    monkeypatch.setattr(PublicKey, "verify_pae", counted)
    return calls


def _ring(*keys: SigningKey) -> Keyring:
    ring = Keyring()
    for k in keys:
        ring.add(k.public)
    return ring


def test_an_artifact_signed_here_verifies_without_the_curve(curve_calls) -> None:
    key = SigningKey.generate()
    art = sign_artifact({"artifact_kind": "x/v1", "proposal_id": "p1", "risk": "low"}, key)
    assert verify_artifact(art, _ring(key)) == key.kid
    assert curve_calls == []


def test_a_signature_made_elsewhere_is_verified_in_full(curve_calls) -> None:
    key = SigningKey.generate()
    art = sign_artifact({"artifact_kind": "x/v1", "n": 1}, key)
    evidence._SIGNED_HERE._made.clear()  # as in another process: `dome verify`
    assert verify_artifact(art, _ring(key)) == key.kid
    assert len(curve_calls) == 1


def test_a_changed_body_with_a_fresh_digest_is_refused_by_the_curve(curve_calls) -> None:
    key = SigningKey.generate()
    art = sign_artifact({"artifact_kind": "x/v1", "risk": "low"}, key)
    forged = {**art, "risk": "high"}
    with pytest.raises(SignatureError) as exc:
        verify_artifact(forged, _ring(key))
    assert exc.value.code == "EVIDENCE_DIGEST_MISMATCH"
    forged["payload_digest"] = digest_json(body_of(forged))  # the attacker recomputes the digest
    with pytest.raises(SignatureError):
        verify_artifact(forged, _ring(key))
    assert len(curve_calls) == 1


def test_our_signature_under_another_keys_kid_is_refused(curve_calls) -> None:
    ours, theirs = SigningKey.generate(), SigningKey.generate()
    art = sign_artifact({"artifact_kind": "x/v1", "n": 2}, ours)
    relabelled = {**art, "kid": theirs.kid}  # the same bytes and signature, claimed for another key
    with pytest.raises(SignatureError):
        verify_artifact(relabelled, _ring(ours, theirs))
    assert len(curve_calls) == 1
