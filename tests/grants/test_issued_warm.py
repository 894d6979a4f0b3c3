"""A grant this coordinator just issued enters the verifier warm (bind_call_key(..., issued=)):
its attempt's first call skips only the Ed25519 check of that exact token; any other token
string, a grant whose key left the keyring, and every per-call check still refuse."""
from __future__ import annotations

from typing import Any

import pytest

from registry import toolprofile as tp
from registry.grant_errors import GrantError
from registry.signing import SigningKey
from tests.attacks import attack
from tests.grants.conftest import World
from tests.grants.test_call_mac import ARGS, IDEM, _call, _mac
from tests.grants.test_verify import _payload_edit


def _issued(world: World, *, prime: bool = True) -> tuple[SigningKey, Any]:
    worker = SigningKey.generate()
    g = world.issue(worker_public_key=worker.public.raw)
    world.verifier.bind_call_key(g.jti, worker, issued=g if prime else None)
    return worker, g


def _no_signature_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = tp.verify_token_signature

    def counting(token: Any, keyring: Any) -> Any:
        seen.append(token)
        return real(token, keyring)
    monkeypatch.setattr(tp, "verify_token_signature", counting)
    return seen


def test_the_first_call_of_an_issued_grant_is_warm(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    checked = _no_signature_checks(monkeypatch)
    worker, g = _issued(world)
    assert _call(world, g, _mac(worker, g)) is None
    assert checked == [] and world.verifier.stats == {"cold": 0, "warm": 1}
    worker2, g2 = _issued(world, prime=False)  # the same grant not entered: verified cold, as before
    assert _call(world, g2, _mac(worker2, g2)) is None
    assert checked == [g2.token] and world.verifier.stats == {"cold": 1, "warm": 1}


def test_the_entered_payload_is_the_tokens_own(world: World) -> None:
    worker, g = _issued(world)
    cold = World(key=world.key, keyring=world.keyring, ledger=world.ledger, registry=world.registry,
                 verifier=type(world.verifier)(world.keyring, world.ledger, registry=world.registry))
    assert world.verifier._cache[g.token].payload == cold.verifier._cold(g.token).payload == dict(g.payload)


@attack("forged-grant")
def test_a_changed_token_string_is_still_verified_and_refused(world: World) -> None:
    worker, g = _issued(world)
    forged = _payload_edit(g.token, lambda p: p.update(budgets={**p["budgets"], "max_calls": 10_000}))  # old signature
    with pytest.raises(GrantError) as err:
        with world.verifier.authorize(forged, method="put_artifact", idempotency_key=IDEM, args=ARGS,
                                      proof=_mac(worker, g), run_id=g.payload["run_id"],
                                      wave_id=g.payload["wave_id"], audience=g.payload["audience"],
                                      now=tp.epoch(g.payload["not_before"]) + 5):
            pass
    assert err.value.code == "GRANT_SIGNATURE_INVALID"


@attack("forged-grant")
def test_an_issued_grant_whose_key_left_the_keyring_is_refused(world: World) -> None:
    worker, g = _issued(world)
    world.verifier.keyring = type(world.keyring)({})  # the key was retired
    assert _call(world, g, _mac(worker, g)) == "GRANT_UNKNOWN_KID"


def test_entering_checks_nothing_away_from_the_call(world: World) -> None:
    """Warm or not, each call still needs its own proof, single use, method and binding."""
    worker, g = _issued(world)
    thief = SigningKey.generate()
    assert _call(world, g, None) == "GRANT_PROOF_MISSING"
    assert _call(world, g, _mac(thief, g)) == "GRANT_PROOF_INVALID"
    good = _mac(worker, g)
    assert _call(world, g, good) is None
    assert _call(world, g, good) == "GRANT_PROOF_REPLAYED"
    assert _call(world, g, _mac(worker, g, method="admin_revoke", nonce="00000000000000b1"),
                 method="admin_revoke") in ("GRANT_ADMIN_METHOD_DENIED", "GRANT_METHOD_NOT_GRANTED")


@attack("forged-grant")
def test_another_grants_token_is_not_entered_under_this_jti(world: World) -> None:
    worker, g = _issued(world, prime=False)
    other = world.issue(worker_public_key=SigningKey.generate().public.raw, node_execution_id="n1.2")
    world.verifier.bind_call_key(g.jti, worker, issued=other)
    assert other.token not in world.verifier._cache and g.token not in world.verifier._cache
