"""In-process session store: ids, lazy TTL expiry, artifact directories.

A session is created only by open_layout. Every tool call first sweeps the
store (sessions idle for longer than the TTL are deleted together with their
artifact directory) and then touches the session it uses. Expired ids are
remembered (bounded) so a late caller gets SESSION_EXPIRED rather than
SESSION_NOT_FOUND. Ids are ses_<12 lowercase hex>, unique per process.
"""
from __future__ import annotations

import json
import secrets
import shutil
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

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
            dead = [s for s in self._sessions.values() if now - s.last_used > ttl]
            for s in dead:
                self._drop(s)
                self._expired[s.id] = None
                while len(self._expired) > _TOMBSTONES:
                    self._expired.popitem(last=False)
        return [s.id for s in dead]

    def create(self, *, source: dict[str, Any], layout: kdb.Layout, top_cell: str,
               top_cells: list[str]) -> Session:
        cfg = self.config
        with self._lock:
            if len(self._sessions) >= cfg.limits.max_sessions:
                raise ToolLimitExceeded("too many open sessions",
                                        details={"limit": "max_sessions", "max": cfg.limits.max_sessions},
                                        hints=["close_session sessions you no longer need"], retry="light")
            sid = self._new_id()
            root = cfg.artifact_root
            try:
                artifact_dir = (root if root.is_absolute() else root.resolve()) / "sessions" / sid
                artifact_dir.mkdir(parents=True, exist_ok=False)
                (artifact_dir / "renders").mkdir()
                (artifact_dir / "drc").mkdir()
            except OSError as exc:
                raise InternalError("cannot create the session artifact directory",
                                    details={"artifact_root": str(root), "error": str(exc)},
                                    hints=["check KLAYOUT_MCP_ARTIFACT_ROOT"]) from exc
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
