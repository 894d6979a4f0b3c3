"""The edges of grant verification that a one-off slip would move unnoticed: the last
instant a used call proof is still a replay, the proof cache's sweep, a grant signed
without a required claim, what a wall-clock refusal reports, and closing the verifier."""
from __future__ import annotations

from typing import Any

import pytest

from coordinator import grants
from coordinator.grants import GrantVerifier
from registry import toolprofile as tp
from registry.grant_errors import GrantError
from registry.signing import SigningKey
from tests.grants.conftest import AUD, RUN, T0, WAVE, World

ARGS = {"path": "a"}
T1 = T0 + 5


def _mac(worker: SigningKey, g: Any, *, ts: float, nonce: str, method: str = "read_file", args: Any = ARGS,
         idem: str | None = "k-000000001") -> str:
    return tp.make_call_mac(tp.call_mac_key(worker.seed), jti=g.jti, method=method, args=args,
                            idempotency_key=idem, ts=int(ts), nonce=nonce)


def _lax(world: World) -> tuple[GrantVerifier, SigningKey, Any]:
    """A verifier at the largest leeway (60 s), so a proof stays fresh for 120 s after it is made."""
    v = GrantVerifier(world.keyring, world.ledger, registry=world.registry, leeway_seconds=tp.MAX_LEEWAY_SECONDS)
    worker = SigningKey.generate()
    g = world.issue(caps=("read",), worker_public_key=worker.public.raw)
    v.bind_call_key(g.jti, worker)
    return v, worker, g


def _call(v: GrantVerifier, g: Any, proof: str, now: float) -> str | None:
    try:
        with v.authorize(g.token, method="read_file", run_id=RUN, wave_id=WAVE, audience=AUD, now=now,
                         args=ARGS, idempotency_key="k-000000001", proof=proof):
            pass
    except GrantError as err:
        return err.code
    return None


def test_a_used_proof_is_a_replay_up_to_the_last_instant_it_is_fresh(world: World) -> None:
    """A proof stamped `leeway` ahead of its first use is fresh until 2 x leeway after that
    use, so at that very instant it must still be refused as a replay."""
    v, worker, g = _lax(world)
    lead = tp.MAX_LEEWAY_SECONDS
    proof = _mac(worker, g, ts=T1 + lead, nonce="00000000000000d1")
    assert _call(v, g, proof, T1) is None
    last = T1 + 2 * lead  # |last - ts| == leeway: not stale
    assert _call(v, g, proof, last) == "GRANT_PROOF_REPLAYED"
    assert _call(v, g, _mac(worker, g, ts=last, nonce="00000000000000d2"), last) is None  # a fresh one passes


def test_an_egress_proof_is_a_replay_up_to_the_last_instant_it_is_fresh(world: World) -> None:
    v, worker, g = _lax(world)
    req = {"host": "api.example", "path": "/v1/chat/completions", "body_digest": "sha256:" + "2" * 64}
    lead = tp.MAX_LEEWAY_SECONDS
    proof = _mac(worker, g, ts=T1 + lead, nonce="00000000000000e1", method="egress", args=req, idem=None)
    kw: dict[str, Any] = dict(run_id=RUN, audience=AUD, request=req)
    assert v.verify_egress(g.token, proof=proof, now=T1, **kw)["jti"] == g.jti
    with pytest.raises(GrantError) as info:
        v.verify_egress(g.token, proof=proof, now=T1 + 2 * lead, **kw)
    assert info.value.code == "GRANT_PROOF_REPLAYED"


def test_the_proof_cache_sweep_drops_expired_proofs_and_keeps_the_fresh_ones(world: World,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grants, "PROOF_SWEEP_AT", 2)  # sweep after every third remembered proof
    v, worker, g = _lax(world)
    lead = tp.MAX_LEEWAY_SECONDS
    b = T1 + 2 * lead  # late enough that the calls below fall inside the grant's validity
    old = [_mac(worker, g, ts=b - lead + i, nonce=f"00000000000000f{i}") for i in range(2)]
    for i, proof in enumerate(old):
        assert _call(v, g, proof, b - 2 * lead + i) is None  # remembered until b + i
    edge = _mac(worker, g, ts=b + lead, nonce="00000000000000a9")
    assert _call(v, g, edge, b) is None  # remembered until b + 2 * lead; the sweep at b keeps all three
    assert len(v._proofs) == 3
    t = b + 2 * lead  # the last instant `edge` is fresh: this call sweeps the cache
    assert _call(v, g, _mac(worker, g, ts=t, nonce="00000000000000aa"), t) is None
    assert len(v._proofs) == 2  # the two old proofs are gone, `edge` and the new one stay
    assert _call(v, g, edge, t) == "GRANT_PROOF_REPLAYED"


def test_a_grant_signed_without_a_required_claim_is_refused_naming_it(world: World) -> None:
    """Even a genuine coordinator signature does not make a payload without `single_use`
    (or any required claim) a grant: refused before any other check, naming the claim."""
    g = world.issue()
    payload = {k: v for k, v in g.payload.items() if k != "single_use"}
    token = tp.envelope_to_token(tp.sign_payload(payload, world.key))
    with pytest.raises(GrantError) as info:
        world.verifier.verify(token, method="read_file", run_id=RUN, wave_id=WAVE, audience=AUD, now=T1)
    assert info.value.code == "GRANT_PAYLOAD_INVALID"
    assert "single_use" in info.value.message


def test_a_wall_clock_refusal_reports_the_seconds_used_since_the_first_call(world: World) -> None:
    g = world.issue(caps=("read",))
    limit = g.payload["budgets"]["max_wall_seconds"]
    kw: dict[str, Any] = dict(run_id=RUN, wave_id=WAVE, audience=AUD, args=ARGS)
    with world.verifier.authorize(g.token, method="read_file", now=T1, **kw):
        pass
    with pytest.raises(GrantError) as info:
        with world.verifier.authorize(g.token, method="read_file", now=T1 + limit + 7, **kw):
            pass
    assert info.value.code == "GRANT_BUDGET_EXHAUSTED"
    assert info.value.details["budget"] == "max_wall_seconds"
    assert info.value.details["used"] == limit + 7 and info.value.details["limit"] == limit


def test_close_stops_the_group_committer_and_is_harmless_without_one(world: World) -> None:
    GrantVerifier(world.keyring, world.ledger, registry=world.registry).close()
    v = GrantVerifier(world.keyring, world.ledger, registry=world.registry, group_commit=True)
    g = world.issue(caps=("read",))
    with v.authorize(g.token, method="read_file", run_id=RUN, wave_id=WAVE, audience=AUD, now=T1, args=ARGS):
        pass
    v.close()
    assert [e.payload["outcome"] for e in world.events() if e.topic == "grant.call"] == ["ok"]
    with pytest.raises(RuntimeError, match="closed"):  # a closed verifier takes no more grouped charges
        with v.authorize(g.token, method="read_file", run_id=RUN, wave_id=WAVE, audience=AUD, now=T1 + 1,
                         args=ARGS):
            pass


def test_revoke_takes_effect_in_this_verifier_without_asking_the_ledger(world: World) -> None:
    """`revoke` records the revocation and holds it in memory: the pure check (`verify`,
    which reads no revocation from the ledger) refuses the revoked jti or profile at once,
    and only that one."""
    v = world.verifier
    by_jti, by_profile, other = (world.issue(node_execution_id=f"n1.{i}") for i in (1, 2, 3))
    call: dict[str, Any] = dict(method="read_file", run_id=RUN, wave_id=WAVE, audience=AUD, now=T1)
    for g in (by_jti, by_profile, other):
        assert v.verify(g.token, **call).jti == g.jti
    v.revoke(run_id=RUN, jti=by_jti.jti)
    v.revoke(run_id=RUN, profile_id=by_profile.profile_id)
    for g in (by_jti, by_profile):
        with pytest.raises(GrantError) as info:
            v.verify(g.token, **call)
        assert info.value.code == "GRANT_REVOKED"
    assert v.verify(other.token, **call).jti == other.jti


def test_a_bearer_grant_egress_request_is_judged_by_the_grant_whatever_proof_it_carries(world: World) -> None:
    """Only a sender-constrained grant (one with `cnf`) has its call proof checked; a bearer
    grant's request is judged by the grant alone, as on the gateway path."""
    g = world.issue(caps=("read",))
    assert "cnf" not in g.payload
    req = {"host": "api.example", "path": "/v1/chat/completions", "body_digest": "sha256:" + "3" * 64}
    for proof in (None, "dcm1.1800000005.00000000000000b7." + "0" * 64):
        p = world.verifier.verify_egress(g.token, run_id=RUN, audience=AUD, proof=proof, request=req, now=T1)
        assert p["jti"] == g.jti


def test_a_revocation_earlier_in_the_same_uncommitted_batch_refuses_the_call(world: World) -> None:
    """The call's transaction asks its own transaction whether the grant is revoked, so a
    revocation stored earlier in the same ledger batch (one commit for a request's calls),
    not yet committed, already refuses it."""
    g = world.issue()
    kw: dict[str, Any] = dict(run_id=RUN, wave_id=WAVE, audience=AUD, now=T1, args=ARGS)
    with world.verifier.authorize(g.token, method="read_file", **kw):
        pass  # this verifier has read the run's records: the revocation below is news to it
    with world.ledger.batch():
        world.ledger.revoke(jti=g.jti, profile_id=None, run_id=RUN, reason="earlier in this batch")
        with pytest.raises(GrantError) as info:
            with world.verifier.authorize(g.token, method="read_file", **kw):
                pass
    assert info.value.code == "GRANT_REVOKED"
    assert [e.payload["outcome"] for e in world.events() if e.topic == "grant.call"] == ["ok"]


def test_a_failed_grouped_read_is_charged_even_when_its_grant_was_revoked_meanwhile(world: World) -> None:
    """A read-only call whose action fails is charged as failed, with no revocation check
    (the call already ran): the action's own error reaches the caller, not GRANT_REVOKED."""
    v = GrantVerifier(world.keyring, world.ledger, registry=world.registry, group_commit=True)
    g = world.issue(caps=("read",))
    try:
        with pytest.raises(ZeroDivisionError):
            with v.authorize(g.token, method="read_file", run_id=RUN, wave_id=WAVE, audience=AUD, now=T1,
                             args=ARGS):
                world.ledger.revoke(jti=g.jti, profile_id=None, run_id=RUN, reason="revoked while it ran")
                1 / 0
    finally:
        v.close()
    assert [e.payload["outcome"] for e in world.events() if e.topic == "grant.call"] == ["failed"]
