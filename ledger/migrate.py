"""Run the ledger's Alembic migrations programmatically."""
from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
VERSION_TABLE = "ledger_alembic_version"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head_revision(url: str = "sqlite://") -> str:
    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()


def _run(engine: Engine, fn, revision: str) -> None:
    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    # One transaction (BEGIN IMMEDIATE on SQLite): concurrent openers serialize,
    # and the second one finds the schema already at head.
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        fn(cfg, revision)


def upgrade(engine: Engine, revision: str = "head") -> None:
    if revision == "head" and current_revision(engine) == head_revision():
        return
    _run(engine, command.upgrade, revision)


def downgrade(engine: Engine, revision: str) -> None:
    _run(engine, command.downgrade, revision)
