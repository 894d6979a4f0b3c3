"""Opening the ledger and keys for the integration commands."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from registry.errors import DomeError


class LedgerNotFound(DomeError):
    """No ledger where the command was pointed (bad input: nothing is created)."""
    code = "LEDGER_NOT_FOUND"


class LedgerNotBuilt(DomeError):
    code = "LEDGER_UNAVAILABLE"


def open_ledger(db: str | None, ops_root: Path | str, *, must_exist: bool = True) -> Any:
    """The run ledger; with `must_exist` a missing default SQLite file is an
    error instead of a new, empty ledger (checks must not create state)."""
    if must_exist and db is None and not (Path(ops_root) / "dome.db").is_file():
        raise LedgerNotFound(f"no ledger at {Path(ops_root) / 'dome.db'}",
                             hints=["pass --ops-root of the run (or --db)"])
    try:
        from ledger import Ledger  # type: ignore[attr-defined]
    except ImportError as exc:
        raise LedgerNotBuilt("the ledger is not available in this build") from exc
    return Ledger.open(db, Path(ops_root))
