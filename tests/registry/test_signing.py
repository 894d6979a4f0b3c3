"""DSSE over Ed25519: PAE bytes, round trips, and every way a signed
envelope can be wrong (each with its own code). Real PyNaCl keys."""
from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.canonical import canonical_json
from registry.errors import SignatureError
from registry.signing import (Keyring, PublicKey, SigningKey, b64d, b64e, dsse_sign, dsse_sign_json,
                              dsse_verify, kid_for, pae)

PT = "application/vnd.dome.test+json"
SEED_A = bytes(range(32))
SEED_B = bytes(range(1, 33))


@pytest.fixture
def key() -> SigningKey:
    return SigningKey(SEED_A)


@pytest.fixture
def ring(key: SigningKey) -> Keyring:
    r = Keyring()
    r.add(key.public)
    return r


def _code(fn: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(SignatureError) as info:
        fn(*args, **kwargs)
    return info.value.code


def test_pae_matches_the_dsse_spec_vector() -> None:
    # From the DSSE v1 protocol description.
    assert pae("http://example.com/HelloWorld", b"hello world") == \
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"


def test_pae_counts_bytes_not_characters() -> None:
    assert pae("t\u00e9", "\u20ac".encode()) == b"DSSEv1 3 t\xc3\xa9 3 \xe2\x82\xac"
    assert pae("", b"") == b"DSSEv1 0  0 "


def test_kid_is_derived_from_the_public_key(key: SigningKey) -> None:
    import hashlib
    assert key.kid == "ed25519:" + hashlib.sha256(key.public.raw).hexdigest()[:32]
    assert SigningKey(SEED_A).kid == key.kid != SigningKey(SEED_B).kid
    assert kid_for(key.public.raw) == key.kid


def test_sign_verify_round_trip_returns_the_exact_bytes(key: SigningKey, ring: Keyring) -> None:
    payload = b'{"b": 2, "a": 1}\n'  # deliberately not canonical: bytes are bytes
    env = dsse_sign(PT, payload, key)
    assert env["payloadType"] == PT and env["signatures"][0]["keyid"] == key.kid
    got, kid = dsse_verify(env, ring, expected_type=PT)
    assert got == payload and kid == key.kid
    # and the envelope survives a JSON round trip
    got2, _ = dsse_verify(json.loads(json.dumps(env)), ring, expected_type=PT)
    assert got2 == payload


def test_signature_is_over_pae_not_the_bare_payload(key: SigningKey) -> None:
    import nacl.signing
    payload = b"xyz"
    sig = b64d(dsse_sign(PT, payload, key)["signatures"][0]["sig"])
    nacl.signing.VerifyKey(key.public.raw).verify(pae(PT, payload), sig)
    with pytest.raises(Exception):
        nacl.signing.VerifyKey(key.public.raw).verify(payload, sig)


def test_every_single_byte_change_of_payload_or_signature_fails(key: SigningKey, ring: Keyring) -> None:
    payload = canonical_json({"grant": "g-1", "methods": ["submit_patch"], "n": 1})
    env = dsse_sign(PT, payload, key)
    sig = b64d(env["signatures"][0]["sig"])
    for i in range(len(payload)):
        for flip in (0x01, 0x80):
            bad = copy.deepcopy(env)
            mutated = bytearray(payload)
            mutated[i] ^= flip
            bad["payload"] = b64e(bytes(mutated))
            assert _code(dsse_verify, bad, ring, expected_type=PT) == "SIGNATURE_INVALID", (i, flip)
    for i in range(len(sig)):
        for flip in (0x01, 0x80):
            bad = copy.deepcopy(env)
            mutated = bytearray(sig)
            mutated[i] ^= flip
            bad["signatures"][0]["sig"] = b64e(bytes(mutated))
            assert _code(dsse_verify, bad, ring, expected_type=PT) == "SIGNATURE_INVALID", (i, flip)


def test_changing_the_payload_type_breaks_the_signature(key: SigningKey, ring: Keyring) -> None:
    env = dsse_sign(PT, b"{}", key)
    env["payloadType"] = PT + "x"
    assert _code(dsse_verify, env, ring) == "SIGNATURE_INVALID"


def test_wrong_payload_type_has_its_own_code(key: SigningKey, ring: Keyring) -> None:
    env = dsse_sign("application/vnd.dome.other+json", b"{}", key)
    assert _code(dsse_verify, env, ring, expected_type=PT) == "WRONG_PAYLOAD_TYPE"


def test_unknown_kid_fails_closed(key: SigningKey) -> None:
    env = dsse_sign(PT, b"{}", key)
    other = Keyring()
    other.add(SigningKey(SEED_B).public)
    with pytest.raises(SignatureError) as info:
        dsse_verify(env, other, expected_type=PT)
    assert info.value.code == "UNKNOWN_KID" and info.value.details["kid"] == key.kid
    assert _code(dsse_verify, env, Keyring()) == "UNKNOWN_KID"


def test_a_known_kid_claimed_by_another_key_does_not_verify(key: SigningKey, ring: Keyring) -> None:
    impostor = SigningKey(SEED_B)
    env = dsse_sign(PT, b"{}", impostor)
    env["signatures"][0]["keyid"] = key.kid
    assert _code(dsse_verify, env, ring) == "SIGNATURE_INVALID"


def test_one_valid_known_signature_suffices_among_unknown_ones(key: SigningKey, ring: Keyring) -> None:
    stranger = SigningKey(SEED_B)
    env = dsse_sign(PT, b"{}", stranger)
    env["signatures"].append(dsse_sign(PT, b"{}", key)["signatures"][0])
    assert dsse_verify(env, ring)[1] == key.kid
    # but a forged signature under the known kid does not ride along
    env["signatures"][1]["sig"] = env["signatures"][0]["sig"]
    assert _code(dsse_verify, env, ring) == "SIGNATURE_INVALID"


def test_verification_checks_the_stored_bytes_not_the_meaning(key: SigningKey, ring: Keyring) -> None:
    obj = {"a": 1, "b": [1, 2]}
    env = dsse_sign_json(PT, obj, key)
    assert b64d(env["payload"]) == canonical_json(obj)
    # Same JSON meaning, different bytes: must fail.
    for variant in (b'{"b":[1,2],"a":1}', b'{"a": 1, "b": [1, 2]}', b'{"a":1.0,"b":[1,2]}', canonical_json(obj) + b"\n"):
        assert json.loads(variant) == obj
        bad = dict(env, payload=b64e(variant))
        assert _code(dsse_verify, bad, ring, expected_type=PT) == "SIGNATURE_INVALID"
    # Bytes that were signed non-canonically verify as those exact bytes.
    odd = b'{"b":[1,2],  "a":1}'
    got, _ = dsse_verify(dsse_sign(PT, odd, key), ring, expected_type=PT)
    assert got == odd


@pytest.mark.parametrize("mangle", [
    lambda e: e.pop("payload"), lambda e: e.pop("signatures"), lambda e: e.pop("payloadType"),
    lambda e: e.update(signatures=[]), lambda e: e.update(signatures="x"), lambda e: e.update(payloadType=5),
    lambda e: e.update(payload=5), lambda e: e.update(payload="not base64!"),
    lambda e: e["signatures"][0].pop("sig"), lambda e: e["signatures"][0].update(keyid=7),
    lambda e: e["signatures"].append("x"), lambda e: e["signatures"][0].update(sig=None),
])
def test_malformed_envelopes_are_refused(mangle: Any, key: SigningKey, ring: Keyring) -> None:
    env = dsse_sign(PT, b"{}", key)
    mangle(env)
    assert _code(dsse_verify, env, ring, expected_type=PT) == "SIGNATURE_MALFORMED"


@pytest.mark.parametrize("not_envelope", [None, [], "x", 5])
def test_non_objects_are_refused(not_envelope: Any, ring: Keyring) -> None:
    assert _code(dsse_verify, not_envelope, ring) == "SIGNATURE_MALFORMED"


def test_non_canonical_base64_is_refused(key: SigningKey, ring: Keyring) -> None:
    env = dsse_sign(PT, b"A", key)
    assert env["payload"] == "QQ=="
    env["payload"] = "QR=="  # decodes to the same byte with different spare bits
    assert base64.b64decode("QR==") == b"A"
    assert _code(dsse_verify, env, ring) == "SIGNATURE_MALFORMED"
    env["payload"] = "QQ"  # missing padding
    assert _code(dsse_verify, env, ring) == "SIGNATURE_MALFORMED"


def test_keyring_refuses_a_key_under_a_kid_that_is_not_its_own(key: SigningKey) -> None:
    liar = PublicKey(kid=SigningKey(SEED_B).kid, raw=key.public.raw)
    assert _code(Keyring().add, liar) == "KEY_INVALID"
    assert _code(Keyring, {"ed25519:" + "0" * 32: key.public}) == "KEY_INVALID"
    assert _code(SigningKey, b"short") == "KEY_INVALID"


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=256), st.text(min_size=1, max_size=40))
def test_round_trip_for_any_bytes_and_type(payload: bytes, payload_type: str) -> None:
    key = SigningKey(SEED_A)
    ring = Keyring({key.kid: key.public})
    env = dsse_sign(payload_type, payload, key)
    assert dsse_verify(env, ring, expected_type=payload_type) == (payload, key.kid)
