"""Typed errors of the ledger. Each has its own stable code."""
from __future__ import annotations

from registry.errors import DomeError
from registry.grant_errors import GrantReplayed  # noqa: F401 - the one class; spend_jti raises it


class LedgerError(DomeError):
    code = "LEDGER_ERROR"


class SequenceConflict(LedgerError):
    """An append named an expected sequence that is no longer the run's head."""

    code = "SEQUENCE_CONFLICT"
    retry = "light"


class PayloadTooLarge(LedgerError):
    code = "PAYLOAD_TOO_LARGE"


class InvalidEvent(LedgerError):
    """An append whose fields cannot form a record (bad types, empty topic, ...)."""

    code = "INVALID_EVENT"


class IdempotencyKeyReused(LedgerError):
    """The same (run_id, method, key) came back with a different request."""

    code = "IDEMPOTENCY_KEY_REUSED"


class LedgerNotFound(LedgerError):
    """No ledger where one was expected (the default SQLite file is missing); nothing was created."""

    code = "LEDGER_NOT_FOUND"


class LedgerUnavailable(LedgerError):
    """The database could not be opened or migrated."""

    code = "LEDGER_UNAVAILABLE"
    retry = "heavy"


class RecordUnreadable(LedgerError):
    """A stored event cannot be read back as a record (its bytes are not bytes): the ledger was
    changed outside dome. Names the record; `dome ledger verify` lists every such one."""

    code = "LEDGER_RECORD_UNREADABLE"


class BlobNotFound(LedgerError):
    code = "BLOB_NOT_FOUND"


class BlobCorrupt(LedgerError):
    """A stored blob's bytes no longer hash to its name."""

    code = "BLOB_DIGEST_MISMATCH"
