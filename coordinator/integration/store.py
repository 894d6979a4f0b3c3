"""Opening the ledger and keys for the integration commands."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from registry.errors import DomeError


def open_ledger(db: str | None, ops_root: Path | str) -> Any:
    try:
        from ledger import Ledger  # type: ignore[attr-defined]
    except ImportError as exc:
        raise DomeError("the ledger is not available in this build", code="LEDGER_UNAVAILABLE") from exc
    return Ledger.open(db, Path(ops_root))
