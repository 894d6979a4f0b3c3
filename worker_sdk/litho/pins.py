"""Pinned layout artifacts and the per-session violation cache (RFC 0006 §5).

A layout is pinned by content: its artifact id is the sha256 of the file's
bytes, and a copy lives under the pin root ($DOME_LITHO_PINS, default
./ops/litho/pins). A pinned layout lets a violation id be resolved without
any cache. The session cache is a bounded LRU per session id; evicted ids are
remembered so the engine can say cache_evicted rather than not-found.
"""
from __future__ import annotations

import os
import shutil
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from registry.canonical import digest_bytes

from .errors import LayoutNotPinned

SESSION_CACHE_SIZE = 4096


def pin_root() -> Path:
    return Path(os.environ.get("DOME_LITHO_PINS", "./ops/litho/pins"))


def pin_layout(path: Path | str) -> str:
    path = Path(path)
    data = path.read_bytes()
    aid = digest_bytes(data)
    root = pin_root()
    root.mkdir(parents=True, exist_ok=True)
    dest = root / (aid.split(":", 1)[1] + path.suffix.lower())
    if not dest.exists():
        tmp = dest.with_suffix(dest.suffix + ".tmp")
        shutil.copyfile(path, tmp)
        os.replace(tmp, dest)
    return aid


def resolve_pin(artifact_id: str | None) -> Path:
    if not artifact_id:
        raise LayoutNotPinned("no layout_artifact_id given and the violation is not in the session cache",
                              hints=["evaluate with pin=true and pass its layout_artifact_id to optimize"])
    if not isinstance(artifact_id, str) or not artifact_id.startswith("sha256:"):
        raise LayoutNotPinned("layout_artifact_id is not a sha256 digest", details={"layout_artifact_id": artifact_id})
    hexd = artifact_id.split(":", 1)[1]
    for cand in sorted(pin_root().glob(hexd + ".*")):
        if cand.suffix == ".tmp":
            continue
        if digest_bytes(cand.read_bytes()) == artifact_id:
            return cand
    raise LayoutNotPinned("layout artifact is not pinned here", details={"layout_artifact_id": artifact_id},
                          hints=["evaluate the layout again with pin=true"])


class SessionCache:
    def __init__(self, capacity: int = SESSION_CACHE_SIZE) -> None:
        self.capacity = capacity
        self._data: dict[str, OrderedDict[str, dict[str, Any]]] = {}
        self._evicted: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def put(self, session: str, vid: str, entry: dict[str, Any]) -> None:
        with self._lock:
            od = self._data.setdefault(session, OrderedDict())
            od[vid] = entry
            od.move_to_end(vid)
            self._evicted.get(session, set()).discard(vid)
            while len(od) > self.capacity:
                old, _ = od.popitem(last=False)
                self._evicted.setdefault(session, set()).add(old)

    def get(self, session: str, vid: str) -> dict[str, Any] | None:
        with self._lock:
            od = self._data.get(session)
            if od is None or vid not in od:
                return None
            od.move_to_end(vid)
            return od[vid]

    def group_members(self, session: str, group_id: str) -> list[str]:
        """Violation ids of one group that this session's evaluate reported (and the cache still holds)."""
        with self._lock:
            od = self._data.get(session) or {}
            return [vid for vid, e in od.items()
                    if (e.get("violation") or {}).get("violation_group_id") == group_id]

    def was_evicted(self, session: str, vid: str) -> bool:
        with self._lock:
            return vid in self._evicted.get(session, set())

    def end_session(self, session: str) -> None:
        with self._lock:
            dropped = self._data.pop(session, OrderedDict())
            self._evicted.setdefault(session, set()).update(dropped)


CACHE = SessionCache()
