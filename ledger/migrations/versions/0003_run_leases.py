"""run_leases: one coordinator per run (holder, heartbeat, expiry)

Revision ID: 0003
Revises: 0002
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_leases",
        sa.Column("run_id", sa.String(255), primary_key=True),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("pid_start", sa.String(40)),
        sa.Column("acquired_at", sa.String(40), nullable=False),
        sa.Column("heartbeat_at", sa.String(40), nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
        sa.Column("ttl_s", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("run_leases")
