"""The pure checks of registry/toolprofile.py at their edges, to the second and to the
character: the validity window with its leeway, a call proof's skew, a MAC proof's field
lengths, the token size limit and the bounded header cache."""
from __future__ import annotations

from typing import Any

import pytest

from registry import toolprofile as tp
from registry.grant_errors import GrantError
from registry.signing import SigningKey, b64e, kid_for

NBF, EXP = 1_800_000_000.0, 1_800_000_900.0
WINDOW = {"not_before": "2027-01-15T08:00:00Z", "expires_at": "2027-01-15T08:15:00Z"}


def _code(fn: Any, *a: Any, **kw: Any) -> str | None:
    try:
        fn(*a, **kw)
    except GrantError as err:
        return err.code
    return None


def test_the_validity_window_holds_to_the_leeway_and_not_a_moment_more() -> None:
    assert tp.epoch(WINDOW["not_before"]) == NBF and tp.epoch(WINDOW["expires_at"]) == EXP
    for leeway in (0.0, 30.0):
        assert _code(tp.check_time, WINDOW, NBF - leeway, leeway) is None  # the first valid instant
        assert _code(tp.check_time, WINDOW, NBF - leeway - 0.5, leeway) == "GRANT_NOT_YET_VALID"
        assert _code(tp.check_time, WINDOW, EXP - max(leeway, 0.5), leeway) is None  # inside, before expiry
        assert _code(tp.check_time, WINDOW, EXP + leeway - 0.5, leeway) is None  # the last half second
        assert _code(tp.check_time, WINDOW, EXP + leeway, leeway) == "GRANT_EXPIRED"  # expiry is exclusive
    assert _code(tp.check_time, WINDOW, EXP + 60, 3600) == "GRANT_EXPIRED"  # the leeway is capped at 60 s


def _signed_proof_payload(worker: SigningKey) -> dict[str, Any]:
    raw = worker.public.raw
    return {"jti": "j-1", "cnf": {"kid": kid_for(raw), "public_key": b64e(raw)}}


def test_a_signed_call_proof_is_fresh_up_to_the_leeway_either_side() -> None:
    worker = SigningKey.generate()
    p = _signed_proof_payload(worker)
    ts = 1_800_000_100
    proof = tp.make_call_proof(worker, jti="j-1", method="read_file", args={}, idempotency_key=None, ts=ts)
    kw: dict[str, Any] = dict(method="read_file", args={}, idempotency_key=None, leeway=30)
    for now in (ts - 30, ts, ts + 30):
        assert _code(tp.check_call_proof, p, proof, now=now, **kw) is None, now
    for now in (ts - 31, ts + 31):
        assert _code(tp.check_call_proof, p, proof, now=now, **kw) == "GRANT_PROOF_STALE", now


def test_a_nonce_makes_a_resent_calls_proof_distinct_and_is_absent_when_not_given() -> None:
    call: dict[str, Any] = dict(jti="j-1", method="put_artifact", args={"a": 1}, idempotency_key="k", ts=5)
    assert "nonce" not in tp.call_proof_body(**call)
    assert tp.call_proof_body(**call, nonce="n1")["nonce"] == "n1"
    worker = SigningKey.generate()
    one, two = (tp.make_call_proof(worker, **call, nonce=n) for n in ("n1", "n2"))
    assert one != two and tp.make_call_proof(worker, **call) == tp.make_call_proof(worker, **call)


def test_a_mac_proofs_timestamp_and_nonce_lengths_are_bounded_inclusively() -> None:
    key = tp.call_mac_key(SigningKey.generate().seed)
    p = {"jti": "j-1"}

    def judge(ts: int, nonce: str, now: float) -> str | None:
        proof = tp.make_call_mac(key, jti="j-1", method="read_file", args={}, idempotency_key=None, ts=ts, nonce=nonce)
        return _code(tp.check_call_mac, p, proof, key, method="read_file", args_canonical=b"{}", idempotency_key=None,
                     now=now, leeway=30)

    now = 1_800_000_000
    for nonce in ("a" * 8, "b" * 64):  # the shortest and longest nonce: well formed, accepted
        assert judge(now, nonce, now) is None, len(nonce)
    for nonce in ("a" * 7, "b" * 65):
        assert judge(now, nonce, now) == "GRANT_PROOF_INVALID", len(nonce)
    # a twelve-digit time is well formed (judged by its skew); thirteen digits are not
    assert judge(10**11, "c" * 16, now) == "GRANT_PROOF_STALE"
    assert judge(10**12, "c" * 16, now) == "GRANT_PROOF_INVALID"


def test_a_token_of_exactly_the_size_limit_parses_and_one_character_more_is_refused() -> None:
    def token(body_bytes: int) -> str:
        return tp._compact_token(b"t", b"x" * body_bytes, b"k", b"s")

    exact = next(token(n) for n in range(49_100, 49_200) if len(token(n)) == tp.MAX_TOKEN_BYTES)
    assert tp.parse_token(exact)[2] == "k"
    over = next(token(n) for n in range(49_100, 49_200) if len(token(n)) == tp.MAX_TOKEN_BYTES + 1)
    with pytest.raises(GrantError) as info:
        tp.parse_token(over)
    assert info.value.code == "GRANT_MALFORMED" and info.value.details == {"limit": tp.MAX_TOKEN_BYTES}


def test_the_header_cache_stops_growing_at_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tp, "_HEADERS", {})
    for i in range(1100):
        part = tp.b64u_encode(f"kid-{i}".encode())
        assert tp._header(part) == f"kid-{i}"  # decoded right whether it is kept or not
    assert len(tp._HEADERS) == 1024


def test_base64url_has_one_spelling_per_byte_string() -> None:
    """Unused low bits of the last character must be zero: "QR" would decode to the same
    byte as "QQ", so it is refused, as are padding and the standard alphabet's characters."""
    assert tp.b64u_decode("QQ") == b"A" and tp.b64u_decode("QUI") == b"AB" and tp.b64u_decode("QUJD") == b"ABC"
    for other in ("QR", "QUJ", "QQ==", "+w", "/w"):
        with pytest.raises(GrantError) as info:
            tp.b64u_decode(other)
        assert info.value.code == "GRANT_MALFORMED", other


def test_base64_with_characters_outside_the_alphabet_is_refused_not_skipped() -> None:
    """A lenient decoder would drop the stray characters and decode the rest: a second
    spelling of the same bytes. Both the token's base64url and the envelope's base64 refuse them."""
    with pytest.raises(GrantError) as info:
        tp.b64u_decode("QUJD!!!!")
    assert info.value.code == "GRANT_MALFORMED"
    env = {"payloadType": "t", "payload": "e30=!", "signatures": [{"keyid": "k", "sig": "AAAA"}]}
    with pytest.raises(GrantError) as info:
        tp.envelope_to_token(env)
    assert info.value.code == "GRANT_MALFORMED"
    assert tp.parse_token(tp.envelope_to_token({**env, "payload": "e30="}))[1] == b"{}"


def test_only_a_json_object_of_the_tool_profile_kind_is_a_grant_payload() -> None:
    for body in (b'{"artifact_kind": "dome.event/v1"}', b"{}", b"[1, 2]", b'"dome.tool_profile/v1"'):
        signed = tp.SignedEnvelope(payload_type=tp.PAYLOAD_TYPE, payload=body, kid="k")
        with pytest.raises(GrantError) as info:
            tp.check_payload_type(signed)
        assert info.value.code == "GRANT_PAYLOAD_INVALID", body
    ok = tp.SignedEnvelope(payload_type=tp.PAYLOAD_TYPE, payload=b'{"artifact_kind": "%s"}' % tp.ARTIFACT_KIND.encode(),
                           kid="k")
    assert tp.check_payload_type(ok) == {"artifact_kind": tp.ARTIFACT_KIND}


def test_a_well_keyed_mac_proof_with_a_malformed_field_is_refused_as_malformed() -> None:
    """Each field's form is checked on its own: a MAC made with the right key over a time
    that is not ASCII digits or too long, a nonce too short or not hex, is still malformed."""
    import hmac as hmac_

    key = tp.call_mac_key(SigningKey.generate().seed)
    p = {"jti": "j-1", "cnf": {"kid": "kid-w"}}

    def proof(ts: str, nonce: str) -> str:
        mac = hmac_.digest(key, tp._mac_message("j-1", "read_file", b"{}", None, ts, nonce), "sha256").hex()
        return f"{tp.CALL_MAC_PREFIX}{ts}.{nonce}.{mac}"

    good = "0123456789abcdef"
    for ts, nonce, now in (("abc", good, 0), ("\uff11\uff12\uff13", good, 123), ("1" * 13, good, int("1" * 13)),
                           ("1800000000", "zzzzzzzz", 1_800_000_000), ("1800000000", "abcdef1", 1_800_000_000)):
        assert _code(tp.check_call_mac, p, proof(ts, nonce), key, method="read_file", args_canonical=b"{}",
                     idempotency_key=None, now=now, leeway=30) == "GRANT_PROOF_INVALID", (ts, nonce)
    mac_not_ascii = proof("1800000000", good)[:-1] + "\u00e9"
    assert _code(tp.check_call_mac, p, mac_not_ascii, key, method="read_file", args_canonical=b"{}",
                 idempotency_key=None, now=1_800_000_000, leeway=30) == "GRANT_PROOF_INVALID"
    assert _code(tp.check_call_mac, p, proof("1800000000", good), key, method="read_file", args_canonical=b"{}",
                 idempotency_key=None, now=1_800_000_000, leeway=30) is None


def test_a_refused_mac_proof_names_the_grants_worker_key() -> None:
    key = tp.call_mac_key(SigningKey.generate().seed)
    p = {"jti": "j-1", "cnf": {"kid": "kid-w"}}
    proof = tp.make_call_mac(tp.call_mac_key(SigningKey.generate().seed), jti="j-1", method="read_file", args={},
                             idempotency_key=None, ts=1_800_000_000, nonce="0123456789abcdef")
    for mac_key in (None, key):  # no key registered for the attempt; a proof under another key
        with pytest.raises(GrantError) as info:
            tp.check_call_mac(p, proof, mac_key, method="read_file", args_canonical=b"{}", idempotency_key=None,
                              now=1_800_000_000, leeway=30)
        assert info.value.code == "GRANT_PROOF_INVALID" and info.value.details == {"cnf_kid": "kid-w"}
