"""An in-memory stand-in with the agreed Ledger interface (append, events,
blobs), used only where a test needs no persistence."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MemRecord:
    sequence: int
    topic: str
    run_id: str
    payload: dict


class MemBlobs:
    def __init__(self) -> None:
        self._d: dict[str, bytes] = {}

    def put(self, data: bytes) -> str:
        d = "sha256:" + hashlib.sha256(data).hexdigest()
        self._d[d] = bytes(data)
        return d

    def get(self, digest: str) -> bytes:
        data = self._d[digest]
        assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
        return data


class MemLedger:
    def __init__(self) -> None:
        self._events: dict[str, list[MemRecord]] = {}
        self.blobs = MemBlobs()

    def append(self, run_id: str, topic: str, payload: dict, **kw: Any) -> MemRecord:
        evs = self._events.setdefault(run_id, [])
        rec = MemRecord(len(evs) + 1, topic, run_id, payload)
        evs.append(rec)
        return rec

    def events(self, run_id: str, since: int = 0, limit: int | None = None) -> list[MemRecord]:
        out = [e for e in self._events.get(run_id, []) if e.sequence > since]
        return out[:limit] if limit else out
