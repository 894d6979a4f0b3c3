"""append-only: UPDATE and DELETE on ledger tables raise (SQLite, PostgreSQL)

Revision ID: 0002
Revises: 0001

Other dialects get no triggers; docs/ledger.md says so and `dome ledger
verify` still catches any changed byte through the hash chain.
"""
from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TABLES = ("events", "spent_grants", "revocations", "idempotency_records")


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for table in TABLES:
            for action in ("UPDATE", "DELETE"):
                op.execute(
                    f"CREATE TRIGGER {table}_no_{action.lower()} BEFORE {action} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, 'dome ledger: {table} is append-only "
                    f"({action} refused)'); END"
                )
    elif dialect == "postgresql":
        op.execute(
            "CREATE OR REPLACE FUNCTION dome_ledger_append_only() RETURNS trigger AS $$ "
            "BEGIN RAISE EXCEPTION 'dome ledger: % is append-only (% refused)', "
            "TG_TABLE_NAME, TG_OP; END $$ LANGUAGE plpgsql"
        )
        for table in TABLES:
            op.execute(
                f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                f"FOR EACH ROW EXECUTE FUNCTION dome_ledger_append_only()"
            )
            op.execute(
                f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION dome_ledger_append_only()"
            )


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for table in TABLES:
            for action in ("update", "delete"):
                op.execute(f"DROP TRIGGER IF EXISTS {table}_no_{action}")
    elif dialect == "postgresql":
        for table in TABLES:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}")
        op.execute("DROP FUNCTION IF EXISTS dome_ledger_append_only()")
