"""ledger tables: events, spent_grants, revocations, idempotency_records

Revision ID: 0001
Revises:
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

ID = sa.String(255)
DIGEST = sa.String(80)


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("sequence", sa.Integer, nullable=False),
        sa.Column("event_id", sa.String(64), nullable=False, unique=True),
        sa.Column("ts", sa.String(40), nullable=False),
        sa.Column("topic", ID, nullable=False),
        sa.Column("wave_id", ID),
        sa.Column("node_id", ID),
        sa.Column("node_execution_id", ID),
        sa.Column("task_id", ID),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("payload_digest", DIGEST, nullable=False),
        sa.Column("canonicalization", sa.String(40), nullable=False),
        sa.Column("schema_version", sa.String(60), nullable=False),
        sa.Column("prev_digest", DIGEST),
        sa.Column("record_digest", DIGEST, nullable=False),
        sa.Column("kid", sa.String(80)),
        sa.Column("signature", sa.Text),
        sa.Column("record_bytes", sa.LargeBinary, nullable=False),
        sa.UniqueConstraint("run_id", "sequence", name="uq_events_run_sequence"),
    )
    op.create_table(
        "spent_grants",
        sa.Column("jti", ID, primary_key=True),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("profile_id", ID),
        sa.Column("spent_at", sa.String(40), nullable=False),
    )
    op.create_table(
        "revocations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("jti", ID),
        sa.Column("profile_id", ID),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("revoked_at", sa.String(40), nullable=False),
        sa.Column("event_sequence", sa.Integer),
    )
    op.create_index("ix_revocations_jti", "revocations", ["jti"])
    op.create_index("ix_revocations_profile_id", "revocations", ["profile_id"])
    op.create_table(
        "idempotency_records",
        sa.Column("run_id", ID, primary_key=True),
        sa.Column("method", ID, primary_key=True),
        sa.Column("idempotency_key", ID, primary_key=True),
        sa.Column("request_digest", DIGEST),
        sa.Column("result", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("idempotency_records")
    op.drop_index("ix_revocations_profile_id", table_name="revocations")
    op.drop_index("ix_revocations_jti", table_name="revocations")
    op.drop_table("revocations")
    op.drop_table("spent_grants")
    op.drop_table("events")
