"""Any single changed byte of any stored event is caught by verification,
even after the append-only triggers are dropped."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from ledger import Ledger
from ledger.models import APPEND_ONLY_TABLES
from tests.conftest import dome_cli

TARGET_SEQ = 3  # a signed record in the middle of run-main


def _populate(ops_root: Path, signer) -> None:
    with Ledger.open(None, ops_root) as led:
        led.append("run-main", "run.started", {"seed": 7, "nodes": ["n1", "n2"]})
        led.append("run-main", "task.dispatched", {"attempt": 1}, wave_id="w1", node_id="n1",
                   node_execution_id="x1", task_id="t1")
        led.append("run-main", "gate.computed", {"passed": True, "reasons": ["all green"],
                                                 "score": 0.93}, wave_id="w1", node_id="n1",
                   node_execution_id="x1", task_id="t1", signer=signer)
        led.append("run-main", "task.completed", {"outputs": ["a.gds"]}, task_id="t1")
        led.append("run-other", "run.started", {"seed": 1})


def _drop_triggers(db: sqlite3.Connection) -> None:
    for table in APPEND_ONLY_TABLES:
        db.execute(f"DROP TRIGGER {table}_no_update")
        db.execute(f"DROP TRIGGER {table}_no_delete")
    db.commit()


def _flip(value, index: int):
    """Change exactly one byte (XOR 1 keeps ASCII text ASCII)."""
    if isinstance(value, bytes):
        b = bytearray(value)
        b[index] ^= 0x01
        return bytes(b)
    if isinstance(value, int):
        return value ^ 0x40  # a different, unused sequence
    return value[:index] + chr(ord(value[index]) ^ 0x01) + value[index + 1:]


TEXT_COLUMNS = ["run_id", "event_id", "ts", "topic", "wave_id", "node_id", "node_execution_id",
                "task_id", "payload", "payload_digest", "canonicalization",
                "prev_digest", "record_digest", "kid", "signature"]


@pytest.mark.parametrize("column", ["record_bytes", "sequence", "schema_version", *TEXT_COLUMNS])
def test_cli_names_the_record_with_one_changed_byte(ops_root: Path, signer, column: str) -> None:
    _populate(ops_root, signer)
    db = sqlite3.connect(ops_root / "dome.db")
    _drop_triggers(db)
    row_id, value = db.execute(f"SELECT id, {column} FROM events WHERE run_id='run-main' "
                               f"AND sequence={TARGET_SEQ}").fetchone()
    db.execute(f"UPDATE events SET {column} = ? WHERE id = ?", (_flip(value, len(str(value)) // 2
                                                                      if not isinstance(value, int) else 0), row_id))
    db.commit()
    db.close()
    result = dome_cli("ledger", "verify", "--ops-root", str(ops_root), "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert not report["ok"]
    assert report["first_bad"]["row_id"] == row_id
    if column not in ("run_id", "sequence"):
        assert (report["first_bad"]["run_id"], report["first_bad"]["sequence"]) == ("run-main", TARGET_SEQ)


def test_cli_exit_codes_and_human_view(ops_root: Path, signer) -> None:
    _populate(ops_root, signer)
    good = dome_cli("ledger", "verify", "--ops-root", str(ops_root))
    assert good.returncode == 0 and "ok" in good.stdout and "5 events" in good.stdout
    db = sqlite3.connect(ops_root / "dome.db")
    _drop_triggers(db)
    db.execute("UPDATE events SET payload = replace(payload, 'a.gds', 'b.gds')")
    db.commit()
    bad = dome_cli("ledger", "verify", "--ops-root", str(ops_root))
    assert bad.returncode == 1 and "INVALID" in bad.stdout and "sequence 4" in bad.stdout
    missing = dome_cli("ledger", "verify", "--ops-root", str(ops_root / "nowhere"), "--json")
    assert missing.returncode == 2 and "LEDGER_NOT_FOUND" in missing.stdout


@pytest.mark.parametrize("sequence", [TARGET_SEQ, 4])
def test_every_byte_of_every_stored_field_is_covered(ops_root: Path, signer, keyring,
                                                     sequence: int) -> None:
    """Exhaustive: every byte position of every column of a signed record in
    the middle of the chain and of the unsigned last record of the run."""
    _populate(ops_root, signer)
    db = sqlite3.connect(ops_root / "dome.db", isolation_level=None)
    _drop_triggers(db)
    with Ledger.open(None, ops_root) as led:
        assert led.verify(keyring).ok
        row = db.execute(f"SELECT id, record_bytes, {', '.join(TEXT_COLUMNS)} FROM events "
                         f"WHERE run_id='run-main' AND sequence={sequence}").fetchone()
        row_id, columns = row[0], dict(zip(["record_bytes", *TEXT_COLUMNS], row[1:]))
        checked = 0
        for column, value in columns.items():
            if value is None:  # an unsigned record has no kid/signature bytes to change
                assert sequence != TARGET_SEQ and column in ("kid", "signature", "wave_id",
                                                            "node_id", "node_execution_id"), column
                continue
            for index in range(len(value)):
                db.execute(f"UPDATE events SET {column} = ? WHERE id = ?", (_flip(value, index), row_id))
                report = led.verify(keyring)
                assert not report.ok, (column, index)
                assert report.first_bad.row_id == row_id, (column, index)
                db.execute(f"UPDATE events SET {column} = ? WHERE id = ?", (value, row_id))
                checked += 1
        assert led.verify(keyring).ok
    assert checked > 500


def test_deleted_or_reordered_records_break_the_chain(ops_root: Path, signer, keyring) -> None:
    _populate(ops_root, signer)
    db = sqlite3.connect(ops_root / "dome.db", isolation_level=None)
    _drop_triggers(db)
    db.execute("DELETE FROM events WHERE run_id='run-main' AND sequence=2")
    with Ledger.open(None, ops_root) as led:
        bad = led.verify(keyring).first_bad
        assert bad.code == "SEQUENCE_GAP" and bad.sequence == 3
    result = dome_cli("ledger", "verify", "--ops-root", str(ops_root), "--json")
    assert result.returncode == 1 and json.loads(result.stdout)["first_bad"]["sequence"] == 3


def test_stripping_a_signature_is_caught(ops_root: Path, signer, keyring) -> None:
    _populate(ops_root, signer)
    db = sqlite3.connect(ops_root / "dome.db", isolation_level=None)
    _drop_triggers(db)
    db.execute(f"UPDATE events SET kid = NULL, signature = NULL WHERE sequence={TARGET_SEQ} "
               "AND run_id='run-main'")
    with Ledger.open(None, ops_root) as led:
        assert led.verify(keyring).first_bad.code == "SIGNATURE_MISSING"


def test_records_cut_off_the_end_are_caught_through_the_exported_copies(ops_root: Path, signer) -> None:
    from ledger.export import event_path, export_run
    _populate(ops_root, signer)
    with Ledger.open(None, ops_root) as led:
        export_run(led, "run-main")
    event_path(ops_root, "run-main", 1).write_text("{}")  # a damaged copy is only a warning
    ok = dome_cli("ledger", "verify", "--ops-root", str(ops_root), "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert any("EXPORT_DIFFERS" in w for w in json.loads(ok.stdout)["warnings"])
    db = sqlite3.connect(ops_root / "dome.db", isolation_level=None)
    _drop_triggers(db)
    db.execute("DELETE FROM events WHERE run_id='run-main' AND sequence >= 3")
    with Ledger.open(None, ops_root) as led:
        assert led.verify().ok  # the chain alone cannot see a cut-off tail
    bad = dome_cli("ledger", "verify", "--ops-root", str(ops_root), "--json")
    assert bad.returncode == 1
    first = json.loads(bad.stdout)["first_bad"]
    assert first["code"] == "LEDGER_TRUNCATED" and first["sequence"] == 3


def test_record_bytes_rewritten_as_text_is_a_named_bad_record(ops_root: Path, signer) -> None:
    """The same bytes stored as TEXT are not the record: `dome ledger verify` names it and
    `dome verify` reports the run invalid (exit 1) with a typed finding, not an internal error."""
    _populate(ops_root, signer)
    db = sqlite3.connect(ops_root / "dome.db")
    _drop_triggers(db)
    db.execute("UPDATE events SET record_bytes = CAST(record_bytes AS TEXT) "
               f"WHERE run_id='run-main' AND sequence={TARGET_SEQ}")
    db.commit()
    db.close()
    whole = dome_cli("ledger", "verify", "--ops-root", str(ops_root), "--json")
    assert whole.returncode == 1, whole.stdout + whole.stderr
    first = json.loads(whole.stdout)["first_bad"]
    assert (first["run_id"], first["sequence"], first["code"]) == ("run-main", TARGET_SEQ, "RECORD_MALFORMED")
    run = dome_cli("verify", "run-main", "--ops-root", str(ops_root), "--json")
    assert run.returncode == 1, run.stdout + run.stderr
    details = " ".join(c["detail"] for c in json.loads(run.stdout)["failures"])
    assert "LEDGER_RECORD_UNREADABLE" in details and f"sequence {TARGET_SEQ}" in details, details
