"""Grant verification: the adversarial matrix, ordering, warm path, single use,
revocation, budgets and sender-constrained grants."""
from __future__ import annotations

import base64
import json
from typing import Any, Callable

import pytest

from coordinator.grants import GrantVerifier
from registry import toolprofile as tp
from registry.canonical import canonical_json
from registry.grant_errors import GrantError, VERIFY_ERRORS
from registry.signing import SigningKey
from tests.grants.conftest import AUD, RUN, T0, WAVE, World

CALL = dict(run_id=RUN, wave_id=WAVE, audience=AUD, now=T0 + 5)


def _reenvelope(token: str, mutate: Callable[[dict], None]) -> str:
    env = tp.token_to_envelope(token)
    mutate(env)
    return tp.envelope_to_token(env)


def _payload_edit(token: str, edit: Callable[[dict], None]) -> str:
    """Alter the signed payload and keep the old signature."""
    def m(env: dict) -> None:
        p = json.loads(base64.b64decode(env["payload"]))
        edit(p)
        env["payload"] = base64.b64encode(canonical_json(p)).decode()
    return _reenvelope(token, m)


def _attempt(w: World, token: str, *, method: str = "read_file", **kw: Any) -> str | None:
    """One gateway call; the rejection code or None when accepted."""
    args = {**CALL, **kw}
    try:
        with w.verifier.authorize(token, method=method, idempotency_key="k-000000001", args={"path": "a"}, **args):
            pass
    except GrantError as err:
        return err.code
    return None


# ---------------------------------------------------------------- the matrix
def _forged_signature(w: World, g: Any) -> tuple[str, dict]:
    def m(env: dict) -> None:
        sig = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
        sig[7] ^= 0x01
        env["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    return _reenvelope(g.token, m), {}


def _unknown_kid(w: World, g: Any) -> tuple[str, dict]:
    attacker = SigningKey.generate()
    return tp.envelope_to_token(tp.sign_payload(g.payload, attacker)), {}


def _real_kid_attacker_key(w: World, g: Any) -> tuple[str, dict]:
    attacker = SigningKey.generate()
    env = tp.sign_payload(g.payload, attacker)
    env["signatures"][0]["keyid"] = w.key.kid
    return tp.envelope_to_token(env), {}


def _wrong_payload_type(w: World, g: Any) -> tuple[str, dict]:
    # a genuine coordinator signature, but over another kind of record (type confusion)
    return tp.envelope_to_token(tp.sign_payload(g.payload, w.key, payload_type="application/vnd.dome.event+json")), {}


MATRIX: list[tuple[str, str, Callable[[World, Any], tuple[str, dict]]]] = [
    ("forged signature", "GRANT_SIGNATURE_INVALID", _forged_signature),
    ("attacker key under the real kid", "GRANT_SIGNATURE_INVALID", _real_kid_attacker_key),
    ("unknown kid", "GRANT_UNKNOWN_KID", _unknown_kid),
    ("wrong payload type", "GRANT_WRONG_PAYLOAD_TYPE", _wrong_payload_type),
    ("garbage token", "GRANT_MALFORMED", lambda w, g: ("dgt1.%%%not-base64", {})),
    ("expired", "GRANT_EXPIRED", lambda w, g: (g.token, {"now": tp.epoch(g.payload["expires_at"]) + 61})),
    ("not yet valid", "GRANT_NOT_YET_VALID", lambda w, g: (g.token, {"now": T0 - 61})),
    ("wrong audience", "GRANT_WRONG_AUDIENCE", lambda w, g: (g.token, {"audience": "other-gateway"})),
    ("wrong run", "GRANT_WRONG_RUN", lambda w, g: (g.token, {"run_id": "run-2"})),
    ("wrong wave", "GRANT_WRONG_WAVE", lambda w, g: (g.token, {"wave_id": "wave-2"})),
    ("method not granted", "GRANT_METHOD_NOT_GRANTED", lambda w, g: (g.token, {"method": "evaluate"})),
    ("admin method asked for by a worker", "GRANT_ADMIN_METHOD_DENIED", lambda w, g: (g.token, {"method": "promote"})),
]


@pytest.mark.parametrize("name,code,make", MATRIX, ids=[m[0] for m in MATRIX])
def test_adversarial_matrix_each_rejected_with_its_own_code_and_only_a_rejection_event(
        world: World, name: str, code: str, make: Callable) -> None:
    g = world.issue()
    token, overrides = make(world, g)
    runs = sorted({RUN, overrides.get("run_id", RUN)})
    before = {r: len(world.events(r)) for r in runs}
    assert _attempt(world, token, **overrides) == code
    new = [e for r in runs for e in world.events(r)[before[r]:]]
    assert [e.topic for e in new] == ["grant.rejected"], name
    assert new[0].payload["code"] == code
    # and the genuine grant still works afterwards
    assert _attempt(world, g.token) is None


def test_matrix_codes_are_distinct_per_rule() -> None:
    codes = {cls.code for cls in VERIFY_ERRORS}
    assert len(codes) == len(VERIFY_ERRORS)
    rules = {c for _, c, _ in MATRIX} | {"GRANT_REPLAYED", "GRANT_REVOKED", "GRANT_BUDGET_EXHAUSTED",
                                         "GRANT_WRONG_WORKER", "GRANT_PROOF_MISSING"}
    assert rules <= codes


def test_valid_call_is_accepted_and_charged(world: World) -> None:
    g = world.issue()
    before = len(world.events())
    assert _attempt(world, g.token) is None
    new = world.events()[before:]
    assert [e.topic for e in new] == ["grant.call"]
    assert new[0].payload["method"] == "read_file" and new[0].payload["profile_id"] == g.profile_id
    assert world.verifier.usage(g.profile_id)["calls_total"] == 1


def test_leeway_is_capped_at_60_seconds(world: World) -> None:
    g = world.issue()
    lax = GrantVerifier(world.keyring, world.ledger, registry=world.registry, leeway_seconds=3600)
    exp = tp.epoch(g.payload["expires_at"])
    lax.verify(g.token, method="read_file", run_id=RUN, wave_id=WAVE, audience=AUD, now=exp + 59)
    with pytest.raises(GrantError) as info:
        lax.verify(g.token, method="read_file", run_id=RUN, wave_id=WAVE, audience=AUD, now=exp + 61)
    assert info.value.code == "GRANT_EXPIRED"


def test_checks_run_in_the_documented_order(world: World) -> None:
    """A token wrong in several ways reports the earliest check."""
    g = world.issue()
    forged = _forged_signature(world, g)[0]
    v = world.verifier
    late = tp.epoch(g.payload["expires_at"]) + 3600
    cases = [  # (token, overrides, expected) — each adds one earlier failure
        (g.token, dict(method="promote"), "GRANT_ADMIN_METHOD_DENIED"),
        (g.token, dict(method="promote", now=late), "GRANT_EXPIRED"),
        (g.token, dict(method="promote", now=late, wave_id="w9"), "GRANT_WRONG_WAVE"),
        (g.token, dict(method="promote", now=late, wave_id="w9", run_id="r9"), "GRANT_WRONG_RUN"),
        (g.token, dict(method="promote", now=late, wave_id="w9", run_id="r9", audience="x"), "GRANT_WRONG_AUDIENCE"),
        (forged, dict(method="promote", now=late, wave_id="w9", run_id="r9", audience="x"), "GRANT_SIGNATURE_INVALID"),
    ]
    for token, over, code in cases:
        args = {**CALL, "method": "read_file", **over}
        with pytest.raises(GrantError) as info:
            v.verify(token, **args)
        assert info.value.code == code
    assert tp.CHECK_ORDER == ("signature", "payload_type", "audience", "binding", "time", "jti", "revocation",
                              "method", "budget")


FIELDS = ["artifact_kind", "version", "object_id", "profile_id", "run_id", "wave_id", "node_id", "node_execution_id",
          "created_at", "producer", "subject", "contract_id", "contracts", "policy_version", "policy_ref", "issued_at",
          "not_before", "expires_at", "jti", "audience", "single_use", "allowed_capabilities", "allowed_methods",
          "constraints", "budgets", "issuer", "canonicalization", "card_ref", "resolver_ref", "worker_id", "cnf"]


def _alter(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value[:-1] + ("0" if value[-1:] != "0" else "1")
    if isinstance(value, list):
        return value + ["promote"]
    if isinstance(value, dict):
        return {**value, "max_calls": 10**6, "allow_hosts": ["*"]}
    raise AssertionError(type(value))


def test_every_field_of_a_signed_grant_altered_after_signing_is_rejected(world: World) -> None:
    worker = SigningKey.generate()
    g = world.issue(worker_id="w-1", worker_public_key=worker.public.raw)
    assert sorted(g.payload) == sorted(FIELDS), "the test must cover every field"
    for name in FIELDS:
        forged = _payload_edit(g.token, lambda p, n=name: p.__setitem__(n, _alter(p[n])))
        with pytest.raises(GrantError) as info:
            world.verifier.verify(forged, method="read_file", worker_id="w-1", **CALL)
        assert info.value.code == "GRANT_SIGNATURE_INVALID", name
        dropped = _payload_edit(g.token, lambda p, n=name: p.pop(n))
        with pytest.raises(GrantError) as info:
            world.verifier.verify(dropped, method="read_file", worker_id="w-1", **CALL)
        assert info.value.code == "GRANT_SIGNATURE_INVALID", name
    added = _payload_edit(g.token, lambda p: p.__setitem__("admin", True))
    with pytest.raises(GrantError) as info:
        world.verifier.verify(added, method="read_file", worker_id="w-1", **CALL)
    assert info.value.code == "GRANT_SIGNATURE_INVALID"
    for env_edit in (lambda e: e.__setitem__("payloadType", "application/vnd.dome.toolprofile+json;v=2"),
                     lambda e: e["signatures"].append(dict(e["signatures"][0]))):
        with pytest.raises(GrantError) as info:
            world.verifier.verify(_reenvelope(g.token, env_edit), method="read_file", worker_id="w-1", **CALL)
        assert info.value.code in ("GRANT_SIGNATURE_INVALID", "GRANT_MALFORMED")


# ---------------------------------------------------------------- state checks
def test_single_use_grant_is_spent_by_its_first_successful_terminal_write(world: World) -> None:
    g = world.issue()
    assert g.payload["single_use"] is True
    """The spec's "first successful write call" is the terminal write: the writes an attempt
    makes before it (artifacts, its patch) leave the grant usable, and the first successful
    `complete_task` spends it for every method."""
    for _ in range(2):  # writes before the terminal one, repeated: none of them spends it
        assert _attempt(world, g.token, method="put_artifact") is None
        assert _attempt(world, g.token, method="submit_patch") is None
    calls = [e.payload for e in world.events() if e.topic == "grant.call"]
    assert len(calls) == 4 and not any(c["spent_jti"] for c in calls)
    assert _attempt(world, g.token, method="complete_task") is None  # the terminal write spends it
    for method in ("complete_task", "read_file", "put_artifact"):
        before = len(world.events())
        assert _attempt(world, g.token, method=method) == "GRANT_REPLAYED"
        assert [e.topic for e in world.events()[before:]] == ["grant.rejected"]


def test_replay_is_refused_by_a_fresh_verifier_rebuilt_from_the_ledger(world: World) -> None:
    g = world.issue()
    assert _attempt(world, g.token, method="complete_task") is None
    world.verifier = GrantVerifier(world.keyring, world.ledger, registry=world.registry)  # coordinator restart
    assert _attempt(world, g.token, method="complete_task") == "GRANT_REPLAYED"


def test_failed_action_spends_nothing_but_is_charged(world: World) -> None:
    g = world.issue()
    with pytest.raises(RuntimeError):
        with world.verifier.authorize(g.token, method="complete_task", idempotency_key="k-000000001", **CALL) as call:
            call.tx.append(RUN, "task.completed", {"outcome": "succeeded"})
            raise RuntimeError("tool crashed")
    topics = [e.topic for e in world.events()]
    assert "task.completed" not in topics
    assert world.events()[-1].payload["outcome"] == "failed"
    assert world.verifier.usage(g.profile_id)["calls_total"] == 1
    assert _attempt(world, g.token, method="complete_task") is None  # the retry may still spend it


def test_revocation_takes_effect_on_the_next_call(world: World) -> None:
    g = world.issue()
    assert _attempt(world, g.token) is None
    world.verifier.verify(g.token, method="read_file", **CALL)  # warm now
    world.verifier.revoke(run_id=RUN, jti=g.jti, reason="operator")
    assert _attempt(world, g.token) == "GRANT_REVOKED"


def test_revocation_by_profile_id_written_by_another_process(world: World) -> None:
    g = world.issue()
    assert _attempt(world, g.token) is None
    world.ledger.revoke(jti=None, profile_id=g.profile_id, run_id=RUN, reason="other process")
    assert _attempt(world, g.token) == "GRANT_REVOKED"
    fresh = GrantVerifier(world.keyring, world.ledger, registry=world.registry)
    with pytest.raises(GrantError) as info:
        fresh.verify(g.token, method="read_file", **CALL)
    assert info.value.code == "GRANT_REVOKED"


def test_budget_exhausted_and_rejected_calls_are_not_charged(world: World) -> None:
    g = world.issue()  # progress.write budget is 2 in this world
    assert _attempt(world, g.token, method="report_progress") is None
    assert _attempt(world, g.token, method="report_progress") is None  # a retry: charged too
    before = len(world.events())
    assert _attempt(world, g.token, method="report_progress") == "GRANT_BUDGET_EXHAUSTED"
    assert [e.topic for e in world.events()[before:]] == ["grant.rejected"]
    assert world.verifier.usage(g.profile_id)["by_family"]["progress.write"] == 2
    assert _attempt(world, g.token, method="read_file") is None  # other families still have budget


def test_wall_clock_budget_counts_from_the_first_call(world: World) -> None:
    g = world.issue(caps=("read",))
    limit = g.payload["budgets"]["max_wall_seconds"]
    assert _attempt(world, g.token, now=T0 + 10) is None
    assert _attempt(world, g.token, now=T0 + 10 + limit - 1) is None
    # still inside expiry + leeway, but past the wall budget
    assert _attempt(world, g.token, now=T0 + 10 + limit + 1) == "GRANT_BUDGET_EXHAUSTED"


def test_worker_binding(world: World) -> None:
    g = world.issue(worker_id="w-1")
    assert _attempt(world, g.token, worker_id="w-2") == "GRANT_WRONG_WORKER"
    assert _attempt(world, g.token, worker_id=None) == "GRANT_WRONG_WORKER"
    assert _attempt(world, g.token, worker_id="w-1") is None


def test_warm_path_caches_the_signature_but_not_the_state(world: World) -> None:
    g = world.issue()
    v = world.verifier
    assert v.verify(g.token, method="read_file", **CALL).warm is False
    assert v.verify(g.token, method="read_file", **CALL).warm is True
    world.keyring._keys.clear()  # key withdrawn: the cache must not outlive it
    with pytest.raises(GrantError) as info:
        v.verify(g.token, method="read_file", **CALL)
    assert info.value.code == "GRANT_UNKNOWN_KID"


# ---------------------------------------------------------------- sender-constrained grants
def _proof(worker: SigningKey, g: Any, method: str, args: Any, key: str | None, ts: float) -> str:
    return tp.make_call_proof(worker, jti=g.jti, method=method, args=args, idempotency_key=key, ts=int(ts))


def _call(world: World, g: Any, proof: str | None, *, args: Any = None, method: str = "put_artifact",
          key: str = "k-000000001") -> str | None:
    try:
        with world.verifier.authorize(g.token, method=method, idempotency_key=key, args=args, proof=proof, **CALL):
            pass
    except GrantError as err:
        return err.code
    return None


def test_stolen_sender_constrained_grant_is_useless_without_the_worker_key(world: World) -> None:
    worker, thief = SigningKey.generate(), SigningKey.generate()
    g = world.issue(worker_public_key=worker.public.raw)
    args = {"media_type": "text/plain", "content_b64": "aGk="}
    now = CALL["now"]
    assert _call(world, g, None, args=args) == "GRANT_PROOF_MISSING"
    assert _call(world, g, _proof(thief, g, "put_artifact", args, "k-000000001", now), args=args) == "GRANT_PROOF_INVALID"
    other_args = {**args, "content_b64": "b3RoZXI="}
    assert _call(world, g, _proof(worker, g, "put_artifact", other_args, "k-000000001", now), args=args) == "GRANT_PROOF_MISMATCH"
    assert _call(world, g, _proof(worker, g, "put_artifact", args, "k-000000001", now - 600), args=args) == "GRANT_PROOF_STALE"
    good = _proof(worker, g, "put_artifact", args, "k-000000001", now)
    assert _call(world, g, good, args=args) is None
    assert _call(world, g, good, args=args) == "GRANT_PROOF_REPLAYED"


def test_issued_grant_is_a_schema_valid_dsse_signed_tool_profile(world: World) -> None:
    from registry.schema_store import validate
    from registry.signing import dsse_verify
    worker = SigningKey.generate()
    g = world.issue(worker_id="w-1", worker_public_key=worker.public.raw)
    validate("tool_profile", dict(g.payload))
    validate("tool_profile", g.artifact())  # the stored form: + payload_digest, kid, signature
    payload, kid = dsse_verify(g.envelope, world.keyring, expected_type=tp.PAYLOAD_TYPE)  # standard DSSE
    assert kid == world.key.kid and json.loads(payload) == g.payload
    assert tp.token_to_envelope(g.token) == g.envelope
    assert tp.envelope_to_token(g.envelope) == g.token
    issued = [e for e in world.events() if e.topic == "grant.issued"][-1]
    assert issued.payload["profile"] == g.payload and issued.kid == world.key.kid
    assert g.envelope["signatures"][0]["sig"] not in json.dumps(issued.payload)  # no bearer token in the ledger
    p = g.payload
    assert p["expires_at"] > p["issued_at"] and len(p["jti"]) == 32 and p["audience"] == AUD


def test_property_no_mutation_of_a_token_verifies_or_escapes_as_another_error(world: World) -> None:
    """Fuzz: any change to any character of a genuine token is a GrantError, never acceptance
    and never an unexpected exception type."""
    from hypothesis import given, settings, strategies as st
    g = world.issue()
    v = world.verifier
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/%"

    @settings(max_examples=300, deadline=None)
    @given(st.integers(0, len(g.token) - 1), st.sampled_from(alphabet), st.booleans())
    def check(pos: int, ch: str, insert: bool) -> None:
        if not insert and g.token[pos] == ch:
            return
        bad = g.token[:pos] + ch + g.token[pos + (0 if insert else 1):]
        if bad == g.token:
            return
        with pytest.raises(GrantError):
            v.verify(bad, method="read_file", **CALL)

    check()
    assert v.verify(g.token, method="read_file", **CALL).jti == g.jti


def test_budget_counters_replay_identically_from_the_ledger(world: World) -> None:
    g = world.issue()
    for method in ("read_file", "grep", "report_progress", "put_artifact", "read_file"):
        assert _attempt(world, g.token, method=method) is None
    assert _attempt(world, g.token, method="report_progress") is None
    assert _attempt(world, g.token, method="report_progress") == "GRANT_BUDGET_EXHAUSTED"
    live = world.verifier.usage(g.profile_id)
    fresh = GrantVerifier(world.keyring, world.ledger, registry=world.registry)
    fresh.verify(g.token, method="read_file", **CALL)  # loads the run's grant.call events
    assert fresh.usage(g.profile_id) == live
    assert live["calls_total"] == 6 and live["by_family"] == {"repo.read": 3, "progress.write": 2, "artifact.write": 1}


def test_listing_check_runs_every_check_that_needs_no_method(world: World) -> None:
    g = world.issue()
    v = world.verifier
    assert v.verify_listing(g.token, run_id=RUN, audience=AUD, now=T0 + 5)["jti"] == g.jti
    for kw, code in ((dict(run_id="run-2"), "GRANT_WRONG_RUN"), (dict(audience="x"), "GRANT_WRONG_AUDIENCE"),
                     (dict(now=T0 - 120), "GRANT_NOT_YET_VALID"), (dict(wave_id="w9"), "GRANT_WRONG_WAVE")):
        with pytest.raises(GrantError) as info:
            v.verify_listing(g.token, **{"run_id": RUN, "audience": AUD, "now": T0 + 5, **kw})
        assert info.value.code == code
    with pytest.raises(GrantError) as info:
        v.verify_listing(_forged_signature(world, g)[0], run_id=RUN, audience=AUD, now=T0 + 5)
    assert info.value.code == "GRANT_SIGNATURE_INVALID"
    world.ledger.revoke(jti=g.jti, run_id=RUN, reason="other process")
    with pytest.raises(GrantError) as info:
        v.verify_listing(g.token, run_id=RUN, audience=AUD, now=T0 + 5)
    assert info.value.code == "GRANT_REVOKED"


def test_concurrent_terminal_writes_spend_a_single_use_grant_exactly_once(world: World) -> None:
    import threading
    g = world.issue()
    results: list[str | None] = []
    barrier = threading.Barrier(6)

    def worker(i: int) -> None:
        barrier.wait()
        try:
            with world.verifier.authorize(g.token, method="complete_task", idempotency_key=f"k-00000000{i}",
                                          args={"outcome": "succeeded", "i": i}, **CALL) as call:
                call.tx.append(RUN, "task.completed", {"i": i})
            results.append(None)
        except GrantError as err:
            results.append(err.code)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # exactly one wins; the others lose on the spent jti, or earlier on the family budget
    # (task.complete allows 3 calls: concurrent calls can never overdraw it)
    assert results.count(None) == 1
    assert set(results) - {None} <= {"GRANT_REPLAYED", "GRANT_BUDGET_EXHAUSTED"}
    assert sum(1 for e in world.events() if e.topic == "task.completed") == 1
    limit = g.payload["budgets"]["max_calls_by_family"]["task.complete"]
    assert world.verifier.usage(g.profile_id)["by_family"].get("task.complete", 0) <= limit
