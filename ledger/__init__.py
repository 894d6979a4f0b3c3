"""The append-only, hash-chained ControlEvent ledger. Imports registry only.

    from ledger import Ledger, EventDraft
    ledger = Ledger.open(None, Path("ops"))          # sqlite:///ops/dome.db, migrated
    rec = ledger.append("run-1", "run.started", {"seed": 7})
    report = ledger.verify(keyring)
"""
from .errors import (BlobCorrupt, BlobNotFound, GrantReplayed, IdempotencyKeyReused,
                     InvalidEvent, LedgerError, LedgerNotFound, LedgerUnavailable, PayloadTooLarge,
                     RecordUnreadable, SequenceConflict)
from .lease import Lease, RunLeaseHeld, RunLeaseLost
from .record import MAX_PAYLOAD_BYTES, PAYLOAD_TYPE, SCHEMA_VERSION, EventDraft, EventRecord
from .store import Ledger, LedgerTransaction
from .verify import LedgerVerifyReport, Problem

__all__ = [
    "Ledger", "LedgerTransaction", "EventDraft", "EventRecord", "LedgerVerifyReport", "Problem",
    "LedgerError", "SequenceConflict", "PayloadTooLarge", "InvalidEvent", "GrantReplayed",
    "IdempotencyKeyReused", "LedgerNotFound", "LedgerUnavailable", "BlobNotFound", "BlobCorrupt",
    "RecordUnreadable",
    "Lease", "RunLeaseHeld", "RunLeaseLost", "MAX_PAYLOAD_BYTES", "PAYLOAD_TYPE", "SCHEMA_VERSION",
]
