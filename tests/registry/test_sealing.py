"""Artifact seals (payload_digest + in-body signature): one rule, checked from
every side, and interoperable with DSSE and with the integration area."""
from __future__ import annotations

import copy
from typing import Any

import pytest

from registry import schema_store
from registry.canonical import canonical_json, digest_json
from registry.errors import SignatureError
from registry.sealing import SEAL_FIELDS, body_of, check_seal, payload_digest_of, seal, to_dsse
from registry.signing import Keyring, SigningKey, dsse_verify
from tests.registry.examples import example

ARTIFACTS = ["tool_profile", "patch_proposal", "stack_plan", "apply_result", "validation_report",
             "promotion_decision", "scheduling_decision", "selection_decision", "conflict_decision"]
KEY = SigningKey(bytes(range(32)))
RING = Keyring({KEY.kid: KEY.public})


def _code(fn: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(SignatureError) as info:
        fn(*args, **kwargs)
    return info.value.code


@pytest.mark.parametrize("name", ARTIFACTS)
def test_sealed_artifacts_are_schema_valid_and_check(name: str) -> None:
    sealed = seal(example(name), KEY)
    schema_store.validate(name, sealed)
    assert check_seal(sealed, RING) == KEY.kid
    assert sealed["payload_digest"] == digest_json(body_of(sealed)) == payload_digest_of(sealed)
    assert not set(SEAL_FIELDS) & set(body_of(sealed))


@pytest.mark.parametrize("name", ARTIFACTS)
def test_changing_any_body_field_breaks_the_digest(name: str) -> None:
    sealed = seal(example(name), KEY)
    for field in body_of(sealed):
        bad = copy.deepcopy(sealed)
        bad[field] = {"tampered": True}
        assert _code(check_seal, bad, RING) == "ARTIFACT_DIGEST_MISMATCH", field
    bad = dict(sealed, added_later="x")
    assert _code(check_seal, bad, RING) == "ARTIFACT_DIGEST_MISMATCH"


def test_a_recomputed_digest_does_not_rescue_a_tampered_body() -> None:
    sealed = seal(example("stack_plan"), KEY)
    bad = dict(sealed, determinism_seed=8)
    bad["payload_digest"] = payload_digest_of(bad)
    assert _code(check_seal, bad, RING) == "SIGNATURE_INVALID"


def test_signature_codes() -> None:
    sealed = seal(example("apply_result"), KEY)
    assert _code(check_seal, sealed, Keyring()) == "UNKNOWN_KID"
    other = SigningKey(bytes(range(1, 33)))
    forged = dict(seal(example("apply_result"), other), kid=KEY.kid)
    assert _code(check_seal, forged, RING) == "SIGNATURE_INVALID"
    assert _code(check_seal, dict(sealed, signature="!!"), RING) == "SIGNATURE_MALFORMED"
    assert _code(check_seal, sealed, RING, payload_type="application/other") == "SIGNATURE_INVALID"


def test_unsigned_seals() -> None:
    sealed = seal(example("patch_proposal"))
    assert "kid" not in sealed and "signature" not in sealed
    assert check_seal(sealed, require_signature=False) is None
    assert _code(check_seal, sealed, RING) == "ARTIFACT_UNSEALED"
    assert _code(check_seal, body_of(sealed), RING) == "ARTIFACT_UNSEALED"
    assert _code(check_seal, dict(sealed, canonicalization="json-sorted"), RING) == "UNKNOWN_CANONICALIZATION"
    half = dict(sealed, kid=KEY.kid)
    assert _code(check_seal, half, RING, require_signature=False) == "ARTIFACT_UNSEALED"


def test_resealing_replaces_old_seal_fields() -> None:
    once = seal(example("conflict_decision"), KEY)
    other = SigningKey(bytes(range(2, 34)))
    twice = seal(once, other)
    assert twice["kid"] == other.kid and twice["payload_digest"] == once["payload_digest"]
    assert check_seal(twice, Keyring({other.kid: other.public})) == other.kid


def test_dsse_export_verifies_with_the_same_bytes() -> None:
    sealed = seal(example("promotion_decision"), KEY)
    env = to_dsse(sealed)
    payload, kid = dsse_verify(env, RING, expected_type="application/vnd.dome.artifact+json")
    assert kid == KEY.kid and payload == canonical_json(body_of(sealed))


def test_interoperates_with_the_integration_evidence_signer() -> None:
    from coordinator.integration import evidence

    theirs = evidence.sign_artifact(example("stack_plan"), KEY)
    assert check_seal(theirs, RING) == KEY.kid
    ours = seal(example("stack_plan"), KEY)
    assert evidence.verify_artifact(ours, RING) == KEY.kid
    assert ours == theirs
