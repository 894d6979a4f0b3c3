"""Event files: one compact JSON line each, a new file created in place, and a torn
or edited file rewritten from the ledger (the ledger wins)."""
from __future__ import annotations

import json
from pathlib import Path

from ledger.export import event_path, export_records, export_run, put_file, render
from tests.ledger.conftest import append_sample_run


def test_new_event_files_are_created_in_place_and_compact(ledger, ops_root: Path, signer) -> None:
    append_sample_run(ledger, signer=signer)
    records = ledger.events("run-1")
    assert len(export_records(records, ops_root)) == len(records)
    folder = event_path(ops_root, "run-1", 1).parent
    assert sorted(f.name for f in folder.iterdir()) == sorted(f"event.{r.sequence}.json" for r in records)
    for rec in records:
        data = event_path(ops_root, "run-1", rec.sequence).read_bytes()
        assert data == render(rec) and data.count(b"\n") == 1  # one line, sorted keys
        assert json.loads(data)["record_digest"] == rec.record_digest


def test_a_torn_event_file_is_rewritten_from_the_ledger(ledger, ops_root: Path, signer) -> None:
    append_sample_run(ledger, signer=signer)
    records = ledger.events("run-1")
    export_records(records, ops_root)
    torn = event_path(ops_root, "run-1", 3)
    whole = torn.read_bytes()
    torn.write_bytes(whole[: len(whole) // 2])  # a write cut short by a crash
    assert export_run(ledger, "run-1") == [torn]
    assert torn.read_bytes() == whole
    assert not [f for f in torn.parent.iterdir() if f.name.startswith(".tmp-")]


def test_put_file_writes_only_what_differs(tmp_path: Path) -> None:
    p = tmp_path / "a.json"
    assert put_file(p, b"one\n") and p.read_bytes() == b"one\n"
    assert not put_file(p, b"one\n")  # same bytes: left alone
    assert put_file(p, b"two\n") and p.read_bytes() == b"two\n"  # other bytes: replaced
    assert put_file(p, b"three\n") and p.read_bytes() == b"three\n"
