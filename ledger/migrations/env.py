"""Alembic environment: runs on the connection Ledger.open hands over
(config.attributes["connection"]), or on config's sqlalchemy.url."""
from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from ledger.models import Base
from ledger.migrate import VERSION_TABLE

config = context.config


def _run(connection) -> None:
    context.configure(connection=connection, target_metadata=Base.metadata,
                      version_table=VERSION_TABLE, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:  # pragma: no cover - only for running `alembic` by hand
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.begin() as conn:
        _run(conn)
