"""tools/list on a run the verifier follows needs no revocation query: the run loop's
writer hands it every revocation as it is stored, so a revoked grant is refused at once."""
from __future__ import annotations

import pytest

from coordinator.grants import GrantVerifier, issue_profile
from coordinator.runloop.writer import LedgerWriter, WriterLedger
from coordinator.runstate import RunState
from registry.grant_errors import GrantRevoked
from tests.attacks import attack

RUN, AUD = "run-follow", "dome-gateway"


def _world(ledger_env):
    ledger, signer, keyring = ledger_env
    writer = LedgerWriter(ledger, RUN, signer, RunState())
    verifier = GrantVerifier(keyring, WriterLedger(writer))
    writer.on_record = verifier.observe  # as the run loop's _on_record does
    queries = []
    real = ledger.is_revoked
    ledger.is_revoked = lambda *a, **k: queries.append(a) or real(*a, **k)  # counts the ledger's revocation queries
    grant = issue_profile(key=signer, run_id=RUN, wave_id="w1", node_id="n1", node_execution_id="n1.1",
                          required_capabilities=["write"])
    return ledger, writer, verifier, grant, queries


@attack("forged-grant")
def test_a_followed_run_lists_without_queries_and_refuses_a_revoked_grant_at_once(ledger_env) -> None:
    ledger, writer, verifier, grant, queries = _world(ledger_env)
    verifier.follow_run(RUN)
    for _ in range(3):
        assert verifier.verify_listing(grant.token, run_id=RUN, audience=AUD)["jti"] == grant.jti
    assert queries == []
    writer.revoke(jti=grant.jti, profile_id=None, reason="attempt ended")  # the run loop's path
    with pytest.raises(GrantRevoked):
        verifier.verify_listing(grant.token, run_id=RUN, audience=AUD)
    assert queries == []


@attack("forged-grant")
def test_a_verifier_that_does_not_follow_still_asks_the_ledger(ledger_env) -> None:
    """A revocation written past the verifier (straight to the ledger) is seen by a verifier
    that does not follow the run, through its query."""
    ledger, writer, verifier, grant, queries = _world(ledger_env)
    assert verifier.verify_listing(grant.token, run_id=RUN, audience=AUD)["jti"] == grant.jti
    ledger.revoke(jti=grant.jti, run_id=RUN, reason="by the admin")
    with pytest.raises(GrantRevoked):
        verifier.verify_listing(grant.token, run_id=RUN, audience=AUD)
    assert len(queries) == 2
