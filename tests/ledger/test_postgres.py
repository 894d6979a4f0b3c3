"""The same ledger on PostgreSQL (--db postgresql+psycopg://...): migrations,
append-only triggers, chain, conflicts, concurrent processes, verify."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

from ledger import Ledger, SequenceConflict
from ledger import migrate
from ledger.engine import make_engines
from tests.conftest import REPO_ROOT, dome_cli
from tests.ledger.conftest import append_sample_run
from tests.ledger.pg import pg_url  # noqa: F401 - fixture


@pytest.fixture
def pg(pg_url: str):  # noqa: F811
    """A clean schema for each test: downgrade to base, then open (upgrade)."""
    engines = make_engines(pg_url)
    migrate.downgrade(engines.write, "base") if migrate.current_revision(engines.write) else None
    engines.dispose()
    return pg_url


def test_postgres_append_verify_and_conflict(pg: str, ops_root: Path, signer, keyring) -> None:
    with Ledger.open(pg, ops_root) as led:
        append_sample_run(led, signer=signer)
        assert [e.sequence for e in led.events("run-1")] == list(range(1, 14))
        with pytest.raises(SequenceConflict):
            led.append("run-1", "task.progress", {}, expected_sequence=3)
        with led.transaction() as tx:
            tx.spend_jti("j", "run-1", "p")
            assert tx.idempotency_put("run-1", "m", "k", {"a": 1}) == {"a": 1}
        assert led.verify(keyring).ok
    result = dome_cli("ledger", "verify", "--db", pg, "--ops-root", str(ops_root), "--json")
    assert result.returncode == 0, result.stdout + result.stderr


def test_postgres_update_delete_truncate_are_refused(pg: str, ops_root: Path) -> None:
    with Ledger.open(pg, ops_root) as led:
        led.append("r", "run.started", {})
        with led.transaction() as tx:
            tx.spend_jti("j", "r", "p")
    engine = create_engine(pg)
    for sql in ("UPDATE events SET topic = 'x.y'", "DELETE FROM events", "TRUNCATE events",
                "DELETE FROM spent_grants"):
        with engine.connect() as conn, pytest.raises(DBAPIError, match="append-only"):
            conn.execute(text(sql))
    engine.dispose()


def test_postgres_migrations_up_and_down(pg: str) -> None:
    engines = make_engines(pg)
    try:
        migrate.upgrade(engines.write)
        migrate.downgrade(engines.write, "0001")
        migrate.downgrade(engines.write, "base")
        assert migrate.current_revision(engines.write) is None
        migrate.upgrade(engines.write)
        assert migrate.current_revision(engines.write) == migrate.head_revision()
    finally:
        engines.dispose()


def test_postgres_concurrent_processes_keep_one_chain(pg: str, ops_root: Path) -> None:
    Ledger.open(pg, ops_root).close()
    writer = Path(__file__).with_name("writer_proc.py")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "DOME_TEST_DB": pg}
    procs = [subprocess.Popen([sys.executable, str(writer), str(ops_root), "shared", w, "100", b],
                              stdout=subprocess.DEVNULL, env=env) for w, b in (("A", "1"), ("B", "7"))]
    for p in procs:
        assert p.wait(timeout=240) == 0
    with Ledger.open(pg, ops_root) as led:
        evs = led.events("shared")
        assert [e.sequence for e in evs] == list(range(1, 201))
        for w in ("A", "B"):
            assert [e.payload["i"] for e in evs if e.payload["writer"] == w] == list(range(100))
        assert led.verify().ok
