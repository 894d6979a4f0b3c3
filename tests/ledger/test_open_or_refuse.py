"""Every command that reads a run opens the ledger one way: a missing ledger is refused with
LEDGER_NOT_FOUND and exit 2 (the wrong --ops-root or --db), and nothing is created."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger import Ledger, LedgerNotFound
from tests.conftest import dome_cli

COMMANDS = [
    ("status",), ("status", "run-x"), ("events", "run-x"), ("verify", "run-x"), ("report", "run-x"),
    ("ledger", "verify"), ("ledger", "export"), ("promote", "run-x", "--consent", "abc"),
]


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_missing_ledger_is_refused_alike_and_nothing_is_created(tmp_path: Path, argv: tuple[str, ...]) -> None:
    ops = tmp_path / "nowhere"
    proc = dome_cli(*argv, "--ops-root", str(ops), "--json", timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr[-500:])
    text = proc.stdout + proc.stderr
    obj = json.loads(text[text.index("{"):text.rindex("}") + 1])
    err = obj.get("error", obj)
    assert err["code"] == "LEDGER_NOT_FOUND" and str(ops / "dome.db") in err["message"], obj
    assert not ops.exists()


def test_ledger_open_must_exist_refuses_without_creating(tmp_path: Path) -> None:
    with pytest.raises(LedgerNotFound) as info:
        Ledger.open(None, tmp_path / "ops", must_exist=True)
    assert info.value.code == "LEDGER_NOT_FOUND" and not (tmp_path / "ops").exists()
    with Ledger.open(None, tmp_path / "ops"):  # the default still creates and migrates
        pass
    with Ledger.open(None, tmp_path / "ops", must_exist=True, migrate_schema=False) as led:
        assert led.run_ids() == []
