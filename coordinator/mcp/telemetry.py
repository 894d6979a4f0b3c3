"""Health and telemetry of the host, and the append-only JSONL event file.

Per-call events are buffered and reach the file at most FLUSH_S after they
happened (or when the host stops): a small tool call pays no file I/O.
Faults, restarts and lifecycle changes are written through at once.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..toolcore import CallStats
from .faults import Fault

FLUSH_S = 1.0  # the longest a per-call event waits in the buffer
_ENCODE = json.JSONEncoder(separators=(",", ":"), default=str).encode


@dataclass
class Telemetry(CallStats):
    """The dispatch core's call stats, plus the host's health and its JSONL event file."""

    path: Path | None = None
    started: float = field(default_factory=time.monotonic)
    last_restart_fault: dict[str, Any] | None = None
    # health
    lifecycle: str = "starting"
    rollout: str = "stable"
    consecutive_failures: int = 0
    restarts: int = 0
    generation: int = 0
    last_fault: dict[str, Any] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _fh: Any = None
    _flushed: float = 0.0

    def _emit(self, event: dict[str, Any], *, buffered: bool = False) -> None:
        if self.path is None:
            return
        with self._lock:
            try:
                if self._fh is None:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    self._fh = open(self.path, "a", buffering=64 * 1024, encoding="utf-8")
                event = {"ts": round(time.time(), 6), "pid": os.getpid(), **event}
                self._fh.write(_ENCODE(event) + "\n")
                now = time.monotonic()
                if not buffered or now - self._flushed >= FLUSH_S:
                    self._fh.flush()
                    self._flushed = now
            except OSError as exc:  # an unwritable ops root must not break the tools; say so once
                print(f"dome mcp: telemetry file disabled ({self.path}: {exc})", file=sys.stderr)
                self.path = None

    def call(self, tool: str, *, ok: bool, ms: float, error: dict[str, Any] | None = None,
             retries: int = 0, client: str | None = None) -> None:
        super().call(tool, ok=ok, ms=ms, error=error, retries=retries)
        self._emit({"event": "call", "tool": tool, "client": client, "ok": ok, "ms": round(ms, 3), "retries": retries,
                    "code": (error or {}).get("code"), "category": (error or {}).get("category")}, buffered=True)

    def fault(self, fault: Fault, *, tool: str | None, restarted: bool) -> None:
        obj = {"tool": tool, "code": fault.code, "category": fault.category.value, "message": fault.message,
               "generation": self.generation}
        self.last_fault = obj
        self.consecutive_failures += 1
        if restarted:
            self.last_restart_fault = obj
        self._emit({"event": "fault", "restarted": restarted, **obj})

    def success(self) -> None:
        self.consecutive_failures = 0

    def restart(self, generation: int, reason: str) -> None:
        self.restarts += 1
        self.generation = generation
        self._emit({"event": "restart", "generation": generation, "reason": reason})

    def worker_started(self, generation: int) -> None:
        self.generation = generation
        self._emit({"event": "worker_started", "generation": generation})

    def lifecycle_to(self, state: str) -> None:
        self.lifecycle = state
        self._emit({"event": "lifecycle", "state": state})

    def health(self) -> dict[str, Any]:
        return {"lifecycle_state": self.lifecycle, "generation": self.generation,
                "uptime_s": round(time.monotonic() - self.started, 3),
                "consecutive_failures": self.consecutive_failures, "restart_count": self.restarts,
                "rollout_state": self.rollout, "last_fault": self.last_fault}

    def snapshot(self) -> dict[str, Any]:
        return {**self.calls_json(),
                "last_restart_fault": self.last_restart_fault,
                "telemetry_path": str(self.path) if self.path else None}

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None
