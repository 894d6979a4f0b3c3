"""Keyed-MAC call proofs, the warm form of a sender-constrained grant's proof: the key
is derived from the attempt's worker key and registered at attempt start; a thief
without it, a replay, a stale or moved proof, a grant whose attempt has ended and a
grant never registered are all refused with the proof codes."""
from __future__ import annotations

from typing import Any

from hypothesis import given, settings, strategies as st

from registry import toolprofile as tp
from registry.grant_errors import GrantError
from registry.signing import SigningKey
from tests.attacks import attack
from tests.grants.conftest import World
from tests.grants.test_verify import CALL

ARGS = {"media_type": "text/plain", "content_b64": "aGk="}
IDEM = "k-000000001"


def _mac(key: SigningKey, g: Any, *, args: Any = ARGS, method: str = "put_artifact", idem: str | None = IDEM,
         ts: float | None = None, nonce: str = "00000000000000a1") -> str:
    return tp.make_call_mac(tp.call_mac_key(key.seed), jti=g.jti, method=method, args=args, idempotency_key=idem,
                            ts=int(CALL["now"] if ts is None else ts), nonce=nonce)


def _call(world: World, g: Any, proof: str | None, *, args: Any = ARGS, method: str = "put_artifact",
          idem: str | None = IDEM) -> str | None:
    try:
        with world.verifier.authorize(g.token, method=method, idempotency_key=idem, args=args, proof=proof, **CALL):
            pass
    except GrantError as err:
        return err.code
    return None


def _registered(world: World) -> tuple[SigningKey, Any]:
    worker = SigningKey.generate()
    g = world.issue(worker_public_key=worker.public.raw)
    world.verifier.bind_call_key(g.jti, worker)
    return worker, g


def test_a_mac_proof_under_the_registered_key_is_accepted_once(world: World) -> None:
    worker, g = _registered(world)
    good = _mac(worker, g)
    assert _call(world, g, good) is None
    assert _call(world, g, good) == "GRANT_PROOF_REPLAYED"
    assert _call(world, g, _mac(worker, g, nonce="00000000000000a2")) is None  # a resend with a fresh nonce
    calls = [e for e in world.events() if e.topic == "grant.call"]
    assert [c.payload["args_digest"] for c in calls] == [tp.args_digest(ARGS)] * 2


@attack("call-proof-forgery")
def test_mac_proofs_refuse_thief_moved_stale_and_malformed(world: World) -> None:
    worker, g = _registered(world)
    thief = SigningKey.generate()
    assert _call(world, g, None) == "GRANT_PROOF_MISSING"
    assert _call(world, g, _mac(thief, g)) == "GRANT_PROOF_INVALID"  # a key of its own
    assert _call(world, g, _mac(worker, g, args={**ARGS, "content_b64": "b3RoZXI="})) == "GRANT_PROOF_INVALID"
    assert _call(world, g, _mac(worker, g, method="report_progress")) == "GRANT_PROOF_INVALID"
    assert _call(world, g, _mac(worker, g, idem=None)) == "GRANT_PROOF_INVALID"
    assert _call(world, g, _mac(worker, g, ts=CALL["now"] - 600)) == "GRANT_PROOF_STALE"
    good = _mac(worker, g)
    ts, nonce, mac = good[len(tp.CALL_MAC_PREFIX):].split(".")
    assert _call(world, g, f"{tp.CALL_MAC_PREFIX}{int(ts) + 1}.{nonce}.{mac}") == "GRANT_PROOF_INVALID"  # ts moved
    for bad in (tp.CALL_MAC_PREFIX, f"{tp.CALL_MAC_PREFIX}{ts}.{nonce}", f"{tp.CALL_MAC_PREFIX}x.{nonce}.{mac}",
                f"{tp.CALL_MAC_PREFIX}{ts}.NOTHEX!!.{mac}", f"{tp.CALL_MAC_PREFIX}{ts}.{nonce}.{mac}=",
                f"{tp.CALL_MAC_PREFIX}{ts}.{nonce}.{mac}.x"):
        assert _call(world, g, bad) == "GRANT_PROOF_INVALID", bad
    # the worker key's signed proof of the same grant still verifies; nothing was charged before
    assert _call(world, g, tp.make_call_proof(worker, jti=g.jti, method="put_artifact", args=ARGS,
                                              idempotency_key=IDEM, ts=int(CALL["now"]))) is None
    assert world.verifier.usage(g.profile_id)["calls_total"] == 1


@attack("call-proof-forgery")
def test_mac_proof_of_an_unregistered_or_ended_attempt_is_refused(world: World) -> None:
    """A MAC proof is good only while the coordinator holds the attempt's key: never for a
    grant it did not register, and not once the attempt's worker has exited."""
    worker = SigningKey.generate()
    g = world.issue(worker_public_key=worker.public.raw)
    assert _call(world, g, _mac(worker, g)) == "GRANT_PROOF_INVALID"
    world.verifier.bind_call_key(g.jti, worker)
    assert _call(world, g, _mac(worker, g, nonce="00000000000000b1")) is None
    world.verifier.drop_call_key(g.jti)
    assert _call(world, g, _mac(worker, g, nonce="00000000000000b2")) == "GRANT_PROOF_INVALID"
    other_worker, other = _registered(world)  # another attempt's key does not carry over
    assert _call(world, g, _mac(other_worker, g, nonce="00000000000000b3")) == "GRANT_PROOF_INVALID"
    assert other.jti != g.jti


@attack("call-proof-forgery")
def test_egress_requests_take_mac_proofs_single_use(world: World) -> None:
    worker, g = _registered(world)
    req = {"host": "api.example", "path": "/v1/chat", "body_digest": "sha256:" + "1" * 64}
    proof = _mac(worker, g, args=req, method="egress", idem=None)
    kw = dict(run_id=CALL["run_id"], audience=CALL["audience"], request=req, now=CALL["now"])
    assert world.verifier.verify_egress(g.token, proof=proof, **kw)["jti"] == g.jti
    for bad in (proof, _mac(SigningKey.generate(), g, args=req, method="egress", idem=None),
                _mac(worker, g, args={**req, "host": "evil.example"}, method="egress", idem=None,
                     nonce="00000000000000c2")):
        try:
            world.verifier.verify_egress(g.token, proof=bad, **kw)
            raise AssertionError("accepted")
        except GrantError as err:
            assert err.code in ("GRANT_PROOF_REPLAYED", "GRANT_PROOF_INVALID")


FIELD = st.text(min_size=0, max_size=12)


@settings(max_examples=300, deadline=None)
@given(a=st.tuples(FIELD, FIELD, FIELD, st.one_of(st.none(), FIELD), st.integers(0, 10**10), FIELD),
       b=st.tuples(FIELD, FIELD, FIELD, st.one_of(st.none(), FIELD), st.integers(0, 10**10), FIELD))
def test_property_distinct_calls_never_share_a_mac_message(a, b) -> None:
    """The length-prefixed message is injective: two different (jti, method, arguments,
    idempotency key, ts, nonce) never collide, so a MAC cannot be moved between calls
    (a missing idempotency key differs from an empty one)."""
    ma = tp._mac_message(a[0], a[1], a[2].encode(), a[3], str(a[4]), a[5])
    mb = tp._mac_message(b[0], b[1], b[2].encode(), b[3], str(b[4]), b[5])
    assert (ma == mb) == (a == b)


def test_the_mac_key_is_derived_from_the_worker_seed_only() -> None:
    k1, k2 = SigningKey.generate(), SigningKey.generate()
    assert tp.call_mac_key(k1.seed) == tp.call_mac_key(SigningKey(k1.seed).seed)
    assert tp.call_mac_key(k1.seed) != tp.call_mac_key(k2.seed) and len(tp.call_mac_key(k1.seed)) == 32
