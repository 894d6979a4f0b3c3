"""An integration artifact is encoded once to be signed and recorded
(`sign_artifact_canonical`): the signed body's bytes and the artifact's bytes must be
exactly what encoding each on its own gives, for any body (nested objects holding the
signature fields' names, keys beyond ASCII, values on the reference encoder's path, an
empty body, a body that already carries old signature fields), and the record the
integration stage writes holds those bytes."""
from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.integration import evidence
from coordinator.integration.evidence import SIG_FIELDS, body_of, sign_artifact, sign_artifact_canonical
from registry.canonical import canonical_json, digest_bytes
from registry.signing import Keyring, SigningKey

KEY = SigningKey.generate()
_keys = st.sampled_from(["kid", "signature", "payload_digest", "canonicalization", "a", "z", "é", "\U0001f600",
                         "\ufb01", "object_id"]) | st.text(max_size=4)
_json = st.recursive(st.none() | st.booleans() | st.integers(-2**53 + 1, 2**53 - 1) | st.floats(allow_nan=False,
                                                                                        allow_infinity=False)
                     | st.text(max_size=6),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3),
                     max_leaves=10)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(_keys, _json, max_size=6))
def test_one_encoding_gives_the_bytes_of_each_encoding_on_its_own(artifact) -> None:
    signed, data = sign_artifact_canonical(artifact, KEY)
    body = body_of(artifact)
    assert signed["payload_digest"] == digest_bytes(canonical_json(body))
    assert data == canonical_json(signed)
    assert signed == sign_artifact(artifact, KEY)  # Ed25519 is deterministic
    ring = Keyring()
    ring.add(KEY.public)
    assert evidence.verify_artifact(signed, ring) == KEY.kid


def test_a_placeholder_found_twice_falls_back_to_the_general_encoding() -> None:
    tokens = iter(["same"] * 8)
    artifact = {"note": {"kid": "placeholder-same"}, "x": 1}
    with mock.patch.object(evidence.secrets, "token_hex", lambda n: next(tokens)):
        signed, data = sign_artifact_canonical(artifact, KEY)
    assert data == canonical_json(signed) and signed["note"] == {"kid": "placeholder-same"}
    assert signed["payload_digest"] == digest_bytes(canonical_json(artifact))
    assert set(SIG_FIELDS) <= set(signed)


def test_the_emitter_records_the_signed_artifacts_bytes(tmp_path) -> None:
    from coordinator.integration.recorder import Emitter
    from ledger import Ledger
    led = Ledger.open(None, tmp_path)
    try:
        emit = Emitter(led, "run-1", KEY, clock=lambda: "2026-11-26T09:00:00Z")
        signed = emit("integration.proposal_verified", {"proposal_id": "p1", "outcome": "accepted",
                                                        "notes": ["é", {"kid": 1}]})
        emit.flush()
        (rec,) = led.events("run-1")
        assert rec.payload == signed and canonical_json(signed) in rec.record_bytes
    finally:
        led.close()


def test_a_flushed_batch_is_each_record_appended_alone_at_the_same_time(tmp_path) -> None:
    import itertools

    from coordinator.integration.recorder import Emitter
    from ledger import Ledger

    def fixed(root):
        ids = (f"ev-{i:06d}" for i in itertools.count())
        return Ledger(Ledger.open(None, root).engines, root, clock=lambda: "2026-11-26T09:00:00.000001Z",
                      new_ids=lambda n: [next(ids) for _ in range(n)])

    a, b = fixed(tmp_path / "a"), fixed(tmp_path / "b")
    try:
        emit = Emitter(a, "run-1", KEY, clock=lambda: "2026-11-26T09:00:00Z")
        signed = [emit("integration.proposal_verified", {"proposal_id": f"p{i}", "outcome": "accepted",
                                                         "risk": "low", "files": ["é", i]}) for i in range(3)]
        emit.flush()
        with b.transaction() as tx:
            alone = [tx.append("run-1", "integration.proposal_verified", s, signer=KEY) for s in signed]
        assert [r.record_bytes for r in a.events("run-1")] == [r.record_bytes for r in alone]
    finally:
        a.close()
        b.close()
