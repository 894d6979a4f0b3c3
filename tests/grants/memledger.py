"""TEMPORARY in-memory stand-in for the agreed Ledger interface, used only
until ledger/ lands in main. Transactions buffer appends and spends and
apply them on commit only."""
from __future__ import annotations

import itertools
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from registry.grant_errors import GrantReplayed


@dataclass(frozen=True)
class Ev:
    sequence: int
    run_id: str
    topic: str
    payload: dict
    ts: float = 0.0


class MemLedger:
    def __init__(self) -> None:
        self._events: list[Ev] = []
        self._spent: set[str] = set()
        self._revoked: set[tuple[str | None, str | None]] = set()
        self._seq = itertools.count(1)

    def append(self, run_id: str, topic: str, payload: dict, **kw: Any) -> Ev:
        ev = Ev(next(self._seq), run_id, topic, dict(payload))
        self._events.append(ev)
        return ev

    @contextmanager
    def transaction(self):
        tx = _Tx(self)
        yield tx
        for jti in tx.spent:
            if jti in self._spent:
                raise GrantReplayed("spent")
        self._spent |= tx.spent
        for a in tx.appends:
            self.append(*a)

    def revoke(self, *, jti=None, profile_id=None, run_id, reason):
        self._revoked.add((jti, profile_id))
        self.append(run_id, "grant.revoked", {"jti": jti, "profile_id": profile_id, "reason": reason})

    def is_revoked(self, jti, profile_id) -> bool:
        return any((j and j == jti) or (p and p == profile_id) for j, p in self._revoked)

    def events(self, run_id, since=0, limit=None):
        return [e for e in self._events if e.run_id == run_id and e.sequence > since][:limit]


class _Tx:
    def __init__(self, ledger: MemLedger) -> None:
        self.ledger, self.appends, self.spent = ledger, [], set()

    def append(self, run_id, topic, payload, **kw):
        self.appends.append((run_id, topic, payload))

    def spend_jti(self, jti, run_id, profile_id):
        if jti in self.ledger._spent or jti in self.spent:
            raise GrantReplayed("spent", details={"jti": jti})
        self.spent.add(jti)
