"""The ledger's hot statements on a write transaction's own driver connection.

Through SQLAlchemy a fixed statement costs several times the driver's own
work, so the gateway's per-call statements, a run's chain head, the events'
insert and savepoints go to the driver inside SQLAlchemy's transaction:
sqlite3 directly, psycopg (or psycopg2, both `pyformat`) through a cursor.
Other dialects and drivers get no path and stay on SQLAlchemy. The fixed
statements are written once with named parameters (`:name`), as SQLite and
SQLAlchemy's `text()` take them; the PostgreSQL path rewrites them to
`%(name)s` once per statement.
"""
from __future__ import annotations

import re
import sqlite3
from typing import Any, Sequence

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

# Insert column order (everything but the autoincrement id).
ROW_COLUMNS = ("run_id", "sequence", "event_id", "ts", "topic", "wave_id", "node_id",
               "node_execution_id", "task_id", "payload", "payload_digest", "canonicalization",
               "schema_version", "prev_digest", "record_digest", "kid", "signature", "record_bytes")


def _insert(placeholder: str) -> str:
    return (f"INSERT INTO events ({', '.join(ROW_COLUMNS)}) "
            f"VALUES ({', '.join([placeholder] * len(ROW_COLUMNS))})")


class SqlitePath:
    """sqlite3 under SQLAlchemy's transaction (BEGIN IMMEDIATE holds the write lock already)."""

    INSERT = _insert("?")
    HEAD = "SELECT sequence, record_digest FROM events WHERE run_id = ? ORDER BY sequence DESC LIMIT 1"

    def __init__(self, conn: Connection) -> None:
        self.raw: sqlite3.Connection = conn.connection.driver_connection

    def row(self, sql: str, params: Any) -> Sequence[Any] | None:
        return self.raw.execute(sql, params).fetchone()

    def execute(self, sql: str, params: Any = ()) -> None:
        self.raw.execute(sql, params)

    def head(self, run_id: str) -> Sequence[Any] | None:
        return self.raw.execute(self.HEAD, (run_id,)).fetchone()

    def insert_events(self, rows: Sequence[Sequence[Any]]) -> None:
        self.raw.executemany(self.INSERT, rows)


class PgPath:
    """A cursor on psycopg's connection under SQLAlchemy's transaction. Driver errors come
    out as SQLAlchemy's (IntegrityError, OperationalError), as they would through it."""

    INSERT = _insert("%s")
    LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
    HEAD = "SELECT sequence, record_digest FROM events WHERE run_id = %s ORDER BY sequence DESC LIMIT 1"
    _TEXT: dict[str, str] = {}  # a named-parameter statement -> its %(name)s form

    def __init__(self, conn: Connection) -> None:
        self.dbapi = conn.dialect.dbapi
        self.cur = conn.connection.driver_connection.cursor()

    def _run(self, sql: str, params: Any, many: bool = False) -> None:
        try:
            (self.cur.executemany if many else self.cur.execute)(sql, params)
        except self.dbapi.Error as exc:
            raise DBAPIError.instance(sql, params, exc, self.dbapi.Error) from exc

    @classmethod
    def _pyformat(cls, sql: str) -> str:
        out = cls._TEXT.get(sql)
        if out is None:
            out = cls._TEXT[sql] = re.sub(r"(?<!:):([a-z_]+)", r"%(\1)s", sql)
        return out

    def row(self, sql: str, params: Any) -> Sequence[Any] | None:
        self._run(self._pyformat(sql), params)
        return self.cur.fetchone()

    def execute(self, sql: str, params: Any = None) -> None:
        self._run(self._pyformat(sql) if params else sql, params)

    def head(self, run_id: str) -> Sequence[Any] | None:
        # the run's lock first, then the head: a statement of its own sees the last commit
        self._run(self.LOCK, ("dome.ledger:" + run_id,))
        self._run(self.HEAD, (run_id,))
        return self.cur.fetchone()

    def insert_events(self, rows: Sequence[Sequence[Any]]) -> None:
        self._run(self.INSERT, rows, many=True)


def driver_path(conn: Connection) -> SqlitePath | PgPath | None:
    """The hot path for this connection's dialect and driver, or None (SQLAlchemy's)."""
    dialect = conn.dialect
    if dialect.name == "sqlite":
        return SqlitePath(conn)
    if dialect.name == "postgresql" and dialect.dbapi.paramstyle == "pyformat":
        return PgPath(conn)
    return None
