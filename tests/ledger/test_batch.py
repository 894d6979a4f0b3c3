"""One commit for several transactions (`Ledger.batch`): each transaction opened inside is a
savepoint that commits or rolls back alone, and what they kept commits once, even when the
body raised (real SQLite ledger, and a throwaway PostgreSQL server)."""
from __future__ import annotations

import uuid

import pytest

from ledger import GrantReplayed, Ledger
from tests.ledger.pg import pg_url  # noqa: F401 - fixture


@pytest.fixture(params=["sqlite", "postgresql"])
def any_ledger(request, ops_root):
    if request.param == "sqlite":
        yield request.getfixturevalue("ledger")
        return
    led = Ledger.open(request.getfixturevalue("pg_url"), ops_root)
    yield led
    led.close()


def _u(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"  # one PostgreSQL server serves every test


class Commits:
    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    def after_commit(self, topics) -> None:
        self.seen.append(list(topics))


def test_a_batch_commits_what_its_transactions_kept_once_even_when_the_body_raises(any_ledger) -> None:
    ledger = any_ledger
    run, j1, j2 = _u("run-b"), _u("jti-1"), _u("jti-2")
    ledger.append(run, "run.started", {})
    commits = Commits()
    ledger._crash = commits
    committed: list[int] = []
    with pytest.raises(RuntimeError, match="call 3"):
        with ledger.batch(on_commit=lambda: committed.append(len(ledger.events(run)))):
            with ledger.transaction() as tx:
                tx.append(run, "task.progress", {"call": 1})
                tx.spend_jti(j1, run)
            with pytest.raises(RuntimeError):
                with ledger.transaction() as tx:
                    tx.append(run, "task.progress", {"call": 2, "rolled": "back"})
                    tx.spend_jti(j2, run)
                    tx.idempotency_put(run, "m", "key-2", {"r": 2})
                    raise RuntimeError("call 2 fails after its writes")
            ledger.append(run, "grant.call", {"call": 2, "outcome": "failed"})
            raise RuntimeError("call 3 is refused")
    assert commits.seen == [["task.progress", "grant.call"]]  # one commit, none of call 2's writes
    assert committed == [3]  # on_commit ran once the commit was durable
    evs = ledger.events(run)
    assert [e.payload for e in evs[1:]] == [{"call": 1}, {"call": 2, "outcome": "failed"}]
    assert [e.sequence for e in evs] == [1, 2, 3] and evs[2].prev_digest == evs[1].record_digest
    with ledger.transaction() as tx:
        assert tx.is_spent(j1) and not tx.is_spent(j2)
        assert tx.idempotency_get(run, "m", "key-2") is None
    assert ledger.verify().ok


def test_savepoints_nest_and_a_spend_rolled_back_can_be_made_again(any_ledger) -> None:
    ledger = any_ledger
    run, j = _u("run-n"), _u("j")
    with ledger.batch():
        with ledger.transaction() as outer:
            outer.append(run, "run.started", {})
            with pytest.raises(GrantReplayed):
                with ledger.transaction() as inner:
                    inner.spend_jti(j, run)
                    with ledger.transaction() as innermost:
                        innermost.spend_jti(j, run)  # the same jti twice: refused, rolled back alone
            with ledger.transaction() as again:
                again.spend_jti(j, run)  # the first spend was rolled back with its savepoint
                again.append(run, "task.completed", {})
    assert [e.topic for e in ledger.events(run)] == ["run.started", "task.completed"]
    with ledger.transaction() as tx:
        assert tx.is_spent(j)


def test_the_revocation_answer_is_kept_in_a_transaction_until_it_revokes(any_ledger) -> None:
    ledger = any_ledger
    run, j1, p1, j2, p2 = _u("run-r"), _u("j1"), _u("p1"), _u("j2"), _u("p2")
    ledger.append(run, "run.started", {})
    with ledger.batch():
        with ledger.transaction() as tx:
            assert not tx.is_revoked(j1, p1)
        with ledger.transaction() as tx:
            assert not tx.is_revoked(j1, p1)  # the first answer, kept
            tx.revoke(run_id=run, reason="r", jti=j1)
            assert tx.is_revoked(j1, p1)
        with ledger.transaction() as tx:
            assert tx.is_revoked(j1, p1)
        with pytest.raises(RuntimeError):
            with ledger.transaction() as tx:
                tx.revoke(run_id=run, reason="r", profile_id=p2)
                assert tx.is_revoked(j2, p2)
                raise RuntimeError("rolled back")
        with ledger.transaction() as tx:
            assert not tx.is_revoked(j2, p2)  # the rolled-back revocation's answer is not kept
    assert ledger.is_revoked(j1) and not ledger.is_revoked(profile_id=p2)
