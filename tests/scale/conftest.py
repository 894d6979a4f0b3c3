"""Fixtures for the scale tests: the run-loop ones (a real ledger and keys)."""
from tests.runloop.conftest import ledger_env  # noqa: F401
