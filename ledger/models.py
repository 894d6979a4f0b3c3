"""SQLAlchemy 2 models of the ledger tables.

The schema in a database is created and changed only by the Alembic
migrations in ledger/migrations/ (tests/ledger/test_migrations.py checks that
these models and the migrated schema agree). The hot paths use the Core
tables (`Model.__table__`) directly.
"""
from __future__ import annotations

from sqlalchemy import Float, Index, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


ID = String(255)
DIGEST = String(80)


class EventRow(Base):
    """One ControlEvent. `record_bytes` are the exact (signed) bytes; the other
    columns are an index over them and must agree with them."""

    __tablename__ = "events"
    __table_args__ = (UniqueConstraint("run_id", "sequence", name="uq_events_run_sequence"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ID, nullable=False)
    sequence: Mapped[int] = mapped_column(Integer, nullable=False)
    event_id: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    ts: Mapped[str] = mapped_column(String(40), nullable=False)
    topic: Mapped[str] = mapped_column(ID, nullable=False)
    wave_id: Mapped[str | None] = mapped_column(ID)
    node_id: Mapped[str | None] = mapped_column(ID)
    node_execution_id: Mapped[str | None] = mapped_column(ID)
    task_id: Mapped[str | None] = mapped_column(ID)
    payload: Mapped[str] = mapped_column(Text, nullable=False)
    payload_digest: Mapped[str] = mapped_column(DIGEST, nullable=False)
    canonicalization: Mapped[str] = mapped_column(String(40), nullable=False)
    schema_version: Mapped[str] = mapped_column(String(60), nullable=False)
    prev_digest: Mapped[str | None] = mapped_column(DIGEST)
    record_digest: Mapped[str] = mapped_column(DIGEST, nullable=False)
    kid: Mapped[str | None] = mapped_column(String(80))
    signature: Mapped[str | None] = mapped_column(Text)
    record_bytes: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)


class SpentGrantRow(Base):
    """A grant id (jti) that has been used; a second use is a replay."""

    __tablename__ = "spent_grants"

    jti: Mapped[str] = mapped_column(ID, primary_key=True)
    run_id: Mapped[str] = mapped_column(ID, nullable=False)
    profile_id: Mapped[str | None] = mapped_column(ID)
    spent_at: Mapped[str] = mapped_column(String(40), nullable=False)


class RevocationRow(Base):
    """A revoked grant id and/or profile id (revocation list)."""

    __tablename__ = "revocations"
    __table_args__ = (
        Index("ix_revocations_jti", "jti"),
        Index("ix_revocations_profile_id", "profile_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    jti: Mapped[str | None] = mapped_column(ID)
    profile_id: Mapped[str | None] = mapped_column(ID)
    run_id: Mapped[str] = mapped_column(ID, nullable=False)
    reason: Mapped[str] = mapped_column(Text, nullable=False)
    revoked_at: Mapped[str] = mapped_column(String(40), nullable=False)
    event_sequence: Mapped[int | None] = mapped_column(Integer)


class IdempotencyRow(Base):
    """The first result of a write call, keyed by (run_id, method, key)."""

    __tablename__ = "idempotency_records"

    run_id: Mapped[str] = mapped_column(ID, primary_key=True)
    method: Mapped[str] = mapped_column(ID, primary_key=True)
    idempotency_key: Mapped[str] = mapped_column(ID, primary_key=True)
    request_digest: Mapped[str | None] = mapped_column(DIGEST)
    result: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[str] = mapped_column(String(40), nullable=False)


class RunLeaseRow(Base):
    """Which coordinator drives a run (ledger.lease). Mutable: a heartbeat
    moves `expires_at`; not evidence, so not append-only."""

    __tablename__ = "run_leases"

    run_id: Mapped[str] = mapped_column(ID, primary_key=True)
    holder: Mapped[str] = mapped_column(ID, nullable=False)
    host: Mapped[str] = mapped_column(ID, nullable=False)
    pid: Mapped[int] = mapped_column(Integer, nullable=False)
    pid_start: Mapped[str | None] = mapped_column(String(40))
    acquired_at: Mapped[str] = mapped_column(String(40), nullable=False)
    heartbeat_at: Mapped[str] = mapped_column(String(40), nullable=False)
    expires_at: Mapped[float] = mapped_column(Float, nullable=False)
    ttl_s: Mapped[float] = mapped_column(Float, nullable=False)


events = EventRow.__table__
spent_grants = SpentGrantRow.__table__
revocations = RevocationRow.__table__
idempotency_records = IdempotencyRow.__table__
run_leases = RunLeaseRow.__table__

APPEND_ONLY_TABLES = ("events", "spent_grants", "revocations", "idempotency_records")
