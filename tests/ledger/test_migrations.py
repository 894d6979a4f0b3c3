"""The schema comes only from the shipped Alembic migrations; up and down work
on a real SQLite file and the models match the migrated schema."""
from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from ledger import Ledger
from ledger import migrate
from ledger.engine import make_engines
from ledger.models import Base


def _tables(db: Path) -> set[str]:
    con = sqlite3.connect(db)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table','trigger')")}
    finally:
        con.close()


def test_open_migrates_a_fresh_file_to_head_in_wal_mode(ops_root: Path) -> None:
    led = Ledger.open(None, ops_root)
    try:
        assert migrate.current_revision(led.engines.write) == migrate.head_revision()
        led.append("r", "run.started", {})
    finally:
        led.close()
    db = ops_root / "dome.db"
    assert {"events", "spent_grants", "revocations", "idempotency_records",
            "events_no_update", "events_no_delete", migrate.VERSION_TABLE} <= _tables(db)
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.close()
    Ledger.open(None, ops_root).close()  # a second open is a no-op upgrade


def test_upgrade_downgrade_upgrade_on_a_real_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    engines = make_engines(url)
    try:
        migrate.upgrade(engines.write, "0001")
        assert "events" in _tables(tmp_path / "m.db")
        assert "events_no_update" not in _tables(tmp_path / "m.db")
        migrate.upgrade(engines.write)
        assert "events_no_update" in _tables(tmp_path / "m.db")
        migrate.downgrade(engines.write, "0001")
        assert "events_no_update" not in _tables(tmp_path / "m.db")
        migrate.downgrade(engines.write, "base")
        assert not {"events", "spent_grants", "revocations", "idempotency_records"} & _tables(tmp_path / "m.db")
        assert migrate.current_revision(engines.write) is None
        migrate.upgrade(engines.write)
        assert migrate.current_revision(engines.write) == migrate.head_revision()
    finally:
        engines.dispose()
    with Ledger.open(url, tmp_path) as led:
        led.append("r", "run.started", {"after": "round trip"})
        assert led.verify().ok


def test_models_match_the_migrated_schema(tmp_path: Path) -> None:
    engines = make_engines(f"sqlite:///{tmp_path / 'd.db'}")
    try:
        migrate.upgrade(engines.write)
        with engines.read.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            diffs = [d for d in compare_metadata(ctx, Base.metadata)
                     if not (isinstance(d, tuple) and d[0] == "remove_table"
                             and d[1].name == migrate.VERSION_TABLE)]
        assert diffs == []
    finally:
        engines.dispose()
