"""In-process session store: ids, lazy TTL expiry, artifact directories.

A session is created only by open_layout (or re-created under its own id by
`restore` after a worker restart). Every tool call first sweeps the store
(sessions idle for longer than the TTL are deleted together with their
artifact directory). Idle time counts from the end of the session's last
call: a session in use is never swept, and `in_use` touches it again when
the call returns, so a call longer than the TTL does not expire it. Expired ids are
remembered (bounded) so a late caller gets SESSION_EXPIRED rather than
SESSION_NOT_FOUND. Ids are ses_<12 lowercase hex>, unique per process.
"""
from __future__ import annotations

import json
import secrets
import shutil
import threading
import time
from collections import Counter, OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import klayout.db as kdb

from .config import Config
from .errors import InternalError, SessionExpired, SessionNotFound, ToolLimitExceeded

_TOMBSTONES = 10_000


@dataclass
class ShapeRecord:
    """A queried object, in the frame of the cell it was queried in."""

    id: str
    kind: str
    frame_cell: str
    cell: str
    instance_path: tuple[str, ...]
    layer: dict[str, Any]
    geometry: Any  # kdb.Box | kdb.Polygon | kdb.Path | kdb.Text | kdb.Edge, in dbu, frame coordinates
    bbox: kdb.Box
    text: str | None = None


@dataclass
class RunRecord:
    run_id: str
    run_dir: Path
    script_path: str
    script_type: str
    deck_sha256: str
    report_path: Path
    markers: list[dict[str, Any]]
    violations: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Session:
    id: str
    source: dict[str, Any]
    layout: kdb.Layout
    top_cell: str
    top_cells: list[str]
    artifact_dir: Path
    last_used: float
    view_state: dict[str, Any] | None = None
    shapes: dict[str, ShapeRecord] = field(default_factory=dict)
    runs: dict[str, RunRecord] = field(default_factory=dict)
    layout_view: Any = None  # klayout.lay.LayoutView, created by the first render; it then owns `layout`
    render_signature: tuple | None = None  # (cell, layer indexes, style) the view is configured for
    id_limit: int = 1_000_000
    lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def dbu(self) -> float:
        return self.layout.dbu

    def write_manifest(self) -> None:
        manifest = {"session_id": self.id, "source": self.source, "selected_top_cell": self.top_cell,
                    "top_cells": self.top_cells, "view": self.view_state,
                    "runs": sorted(self.runs)}
        (self.artifact_dir / "session.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


class SessionStore:
    def __init__(self, config_provider: Callable[[], Config] = Config.from_env,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._config_provider = config_provider
        self._clock = clock
        self._sessions: dict[str, Session] = {}
        self._expired: OrderedDict[str, None] = OrderedDict()
        self._issued: set[str] = set()
        self._busy: Counter[str] = Counter()  # session id -> calls in progress
        self._lock = threading.RLock()

    @property
    def config(self) -> Config:
        return self._config_provider()

    def _new_id(self) -> str:
        while True:
            sid = "ses_" + secrets.token_hex(6)
            if sid not in self._issued:
                self._issued.add(sid)
                return sid

    def sweep(self) -> list[str]:
        """Delete every session idle for longer than the TTL; return their ids."""
        ttl = self.config.ttl_seconds
        now = self._clock()
        with self._lock:
            dead = [s for s in self._sessions.values() if now - s.last_used > ttl and not self._busy[s.id]]
            for s in dead:
                self._drop(s)
                self._expired[s.id] = None
                while len(self._expired) > _TOMBSTONES:
                    self._expired.popitem(last=False)
        return [s.id for s in dead]

    @contextmanager
    def in_use(self, session_id: Any) -> Iterator[None]:
        """Mark a session busy for one call (never swept meanwhile); touch it when the call ends."""
        if not isinstance(session_id, str):
            yield
            return
        self.sweep()  # an already expired session is swept before this call can hold it
        with self._lock:
            self._busy[session_id] += 1
        try:
            yield
        finally:
            with self._lock:
                self._busy[session_id] -= 1
                if self._busy[session_id] <= 0:
                    del self._busy[session_id]
                session = self._sessions.get(session_id)
                if session is not None:
                    session.last_used = self._clock()

    def create(self, *, source: dict[str, Any], layout: kdb.Layout, top_cell: str,
               top_cells: list[str], session_id: str | None = None) -> Session:
        """A new session; `session_id` (with its existing artifact directory) only when restoring one."""
        cfg = self.config
        with self._lock:
            if len(self._sessions) >= cfg.limits.max_sessions:
                raise ToolLimitExceeded("too many open sessions",
                                        details={"limit": "max_sessions", "max": cfg.limits.max_sessions},
                                        hints=["close_session sessions you no longer need"], retry="light")
            sid = session_id or self._new_id()
            self._issued.add(sid)
            root = cfg.artifact_root
            try:
                artifact_dir = (root if root.is_absolute() else root.resolve()) / "sessions" / sid
                artifact_dir.mkdir(parents=True, exist_ok=session_id is not None)
                (artifact_dir / "renders").mkdir(exist_ok=session_id is not None)
                (artifact_dir / "drc").mkdir(exist_ok=session_id is not None)
            except OSError as exc:
                raise InternalError("cannot create the session artifact directory",
                                    details={"artifact_root": str(root), "error": type(exc).__name__},
                                    hints=["check that KLAYOUT_MCP_ARTIFACT_ROOT is writable"]) from exc
            session = Session(id=sid, source=source, layout=layout, top_cell=top_cell, top_cells=top_cells,
                              artifact_dir=artifact_dir.resolve(), last_used=self._clock())
            session.write_manifest()
            self._sessions[sid] = session
            return session

    def get(self, session_id: str) -> Session:
        self.sweep()
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                if session_id in self._expired:
                    raise SessionExpired("session expired after inactivity",
                                         details={"session_id": session_id,
                                                  "ttl_seconds": self.config.ttl_seconds},
                                         hints=["open_layout again"])
                raise SessionNotFound("no such session", details={"session_id": session_id},
                                      hints=["open_layout returns a session_id"])
            session.last_used = self._clock()
            return session

    def close(self, session_id: str) -> tuple[bool, bool]:
        self.sweep()
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                return False, False
            return True, self._drop(session)

    def forget(self, session_id: str) -> None:
        """Drop a session from memory, keeping its artifact folder (a restore that failed halfway)."""
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is not None:
            with session.lock:
                session.shapes.clear()
                view, session.layout_view = session.layout_view, None
                if view is not None:
                    view.destroy()

    def _drop(self, session: Session) -> bool:
        self._sessions.pop(session.id, None)
        with session.lock:
            session.shapes.clear()
            view, session.layout_view = session.layout_view, None
            if view is not None:
                view.destroy()  # also destroys the layout it owns
            shutil.rmtree(session.artifact_dir, ignore_errors=True)
        return not session.artifact_dir.exists()

    def session_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._sessions)
