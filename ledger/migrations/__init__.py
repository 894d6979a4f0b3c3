"""Alembic migrations of the ledger schema, run programmatically by Ledger.open."""
