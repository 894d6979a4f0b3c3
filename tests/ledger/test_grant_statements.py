"""The gateway's per-call statements (spent, revoked, idempotency) written once as SQL
text: the same answers on SQLite (driver directly) and PostgreSQL (SQLAlchemy text)."""
from __future__ import annotations

from pathlib import Path

import pytest

from ledger import Ledger
from ledger.errors import GrantReplayed, IdempotencyKeyReused
from ledger.engine import make_engines
from ledger import migrate
from tests.ledger.pg import pg_url  # noqa: F401 - fixture


@pytest.fixture(params=["sqlite", "postgres"])
def db(request, ops_root: Path):
    if request.param == "sqlite":
        return None
    url = request.getfixturevalue("pg_url")
    engines = make_engines(url)
    migrate.downgrade(engines.write, "base") if migrate.current_revision(engines.write) else None
    engines.dispose()
    return url


def test_spend_revoke_and_idempotency_statements(db, ops_root: Path) -> None:
    with Ledger.open(db, ops_root) as led:
        with led.transaction() as tx:
            assert not tx.is_spent("j1")
            tx.spend_jti("j1", "run-1", "p1")
            assert tx.is_spent("j1") and not tx.is_spent("j2")
            with pytest.raises(GrantReplayed):
                tx.spend_jti("j1", "run-1", "p1")  # a second use of one grant id is a replay
        with led.transaction() as tx:
            with pytest.raises(GrantReplayed):
                tx.spend_jti("j1", "run-1", "p1")  # and stays one after the commit
        assert not led.is_revoked("j2", "p2")
        led.revoke(jti="j2", run_id="run-1", reason="test")
        led.revoke(profile_id="p3", run_id="run-1", reason="test")
        assert led.is_revoked("j2", None) and led.is_revoked("j2", "other")
        assert led.is_revoked(None, "p3") and led.is_revoked("other", "p3")
        assert not led.is_revoked("j3", "p2") and not led.is_revoked(None, None) and not led.is_revoked("", "")
        with led.transaction() as tx:
            assert tx.idempotency_get("run-1", "m", "k") is None
            assert tx.idempotency_put("run-1", "m", "k", {"a": 1}, request_digest="sha256:" + "1" * 64) == {"a": 1}
            assert tx.idempotency_get("run-1", "m", "k") == {"a": 1}
            assert tx.idempotency_get("run-1", "other", "k") is None
            assert tx.idempotency_put("run-1", "m", "k", {"a": 2}, request_digest="sha256:" + "1" * 64) == {"a": 1}
            with pytest.raises(IdempotencyKeyReused):
                tx.idempotency_put("run-1", "m", "k", {"a": 2}, request_digest="sha256:" + "2" * 64)


def test_a_writer_that_gets_in_between_fails_the_insert(pg_url, ops_root: Path) -> None:
    """PostgreSQL: the gateway reads a call's idempotency key absent, and records the result
    without reading it again. Another writer that commits the same key in between makes the
    insert fail on the table's primary key, with SQLAlchemy's IntegrityError (the driver's
    error, mapped as SQLAlchemy maps it), and the transaction leaves nothing."""
    from sqlalchemy.exc import IntegrityError

    from ledger.driver_path import PgPath

    engines = make_engines(pg_url)
    migrate.downgrade(engines.write, "base") if migrate.current_revision(engines.write) else None
    engines.dispose()
    with Ledger.open(pg_url, ops_root) as led, Ledger.open(pg_url, ops_root) as other:
        with pytest.raises(IntegrityError):
            with led.transaction() as tx:
                assert isinstance(tx._fast, PgPath)  # the driver path
                assert tx.idempotency_get("run-1", "m", "k") is None
                tx.append("run-1", "artifact.put", {"n": 1})
                with other.transaction() as otx:
                    otx.idempotency_put("run-1", "m", "k", {"a": "theirs"})
                tx.idempotency_put("run-1", "m", "k", {"a": "mine"})
        assert led.idempotency_get("run-1", "m", "k") == {"a": "theirs"}
        assert led.events("run-1") == []
        with led.transaction() as tx:  # the connection is usable again
            tx.append("run-1", "artifact.put", {"n": 2})
        assert [e.payload["n"] for e in led.events("run-1")] == [2]
