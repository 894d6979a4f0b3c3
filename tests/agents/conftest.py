"""The agent tests share the run-loop fixtures (a real ledger and keys)."""
from tests.runloop.conftest import ledger_env  # noqa: F401 - a fixture
