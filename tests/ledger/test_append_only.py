"""Append-only is enforced by the database: raw UPDATE and DELETE fail."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ledger.models import APPEND_ONLY_TABLES

STATEMENTS = {
    "events": ("UPDATE events SET topic = 'x'", "DELETE FROM events"),
    "spent_grants": ("UPDATE spent_grants SET run_id = 'x'", "DELETE FROM spent_grants"),
    "revocations": ("UPDATE revocations SET reason = 'x'", "DELETE FROM revocations"),
    "idempotency_records": ("UPDATE idempotency_records SET result = '{}'",
                            "DELETE FROM idempotency_records"),
}


@pytest.mark.parametrize("table", APPEND_ONLY_TABLES)
def test_raw_sql_update_and_delete_are_refused(ledger, ops_root: Path, table: str) -> None:
    ledger.append("r", "run.started", {"a": 1})
    with ledger.transaction() as tx:
        tx.spend_jti("j", "r", "p")
        tx.idempotency_put("r", "m", "k", {"ok": True})
    ledger.revoke(jti="j2", run_id="r", reason="x")
    db = sqlite3.connect(ops_root / "dome.db")
    for sql in STATEMENTS[table]:
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            db.execute(sql)
    assert db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] >= 1
    db.close()
