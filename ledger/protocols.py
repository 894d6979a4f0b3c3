"""What the rest of dome needs of a ledger, as structural types.

`Ledger` satisfies each of them; so do the run loop's views of it (the
writer's transactional ledger, the ledger that tells the live view about
integration's records) and in-memory stand-ins in tests. A function that
needs only a run's events says `EventSource`; one that appends too says
`EventLog`; the grants verifier says `GrantLedger`.
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol, Sequence


class EventSource(Protocol):
    def events(self, run_id: str, since: int = 0, limit: int | None = None) -> Sequence[Any]: ...


class EventLog(EventSource, Protocol):
    def append(self, run_id: str, topic: str, payload: dict[str, Any], **keys: Any) -> Any: ...


class GrantLedger(EventLog, Protocol):
    def transaction(self) -> AbstractContextManager[Any]: ...

    def revoke(self, jti: str | None = None, profile_id: str | None = None, *, run_id: str,
               reason: str) -> Any: ...

    def is_revoked(self, jti: str | None = None, profile_id: str | None = None) -> bool: ...
