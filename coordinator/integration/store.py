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


def _sqlite_file(db: str | None, ops_root: Path | str) -> Path | None:
    """The SQLite file a ledger URL names (the default one without --db), or
    None for an in-memory or server database."""
    if db is None:
        return Path(ops_root) / "dome.db"
    from sqlalchemy.engine import make_url
    url = make_url(db)
    database = url.database or ""
    if url.get_backend_name() != "sqlite" or database in ("", ":memory:") or "mode=memory" in db:
        return None
    return Path(database)


def open_ledger(db: str | None, ops_root: Path | str, *, must_exist: bool = True,
                read_only: bool = False, probe: bool = True) -> Any:
    """The run ledger; with `must_exist` a missing SQLite file (the default one
    or the one --db names) is an error instead of a new, empty ledger (checks
    must not create state). `read_only`: the schema is not migrated either, and
    (with `probe`) one read shows the file is a ledger (LedgerUnavailable if not)."""
    where = _sqlite_file(db, ops_root)
    if must_exist and where is not None and not where.is_file():
        raise LedgerNotFound(f"no ledger at {where}", hints=["pass --ops-root of the run (or --db)"])
    try:
        from ledger import Ledger  # type: ignore[attr-defined]
    except ImportError as exc:
        raise LedgerNotBuilt("the ledger is not available in this build") from exc
    ledger = Ledger.open(db, Path(ops_root), migrate_schema=not read_only)
    if read_only and probe:  # not migrated, so not yet read: a damaged file must say so here
        from ledger import LedgerUnavailable
        from sqlalchemy.exc import SQLAlchemyError
        try:
            ledger.head("")
        except SQLAlchemyError as exc:
            ledger.close()
            raise LedgerUnavailable(f"cannot read the ledger at {where or db}: {exc}".splitlines()[0],
                                    hints=["check --db / --ops-root and file permissions"]) from exc
    return ledger
