"""Cooperative cancellation for long worker jobs.

A CancellationToken is checked by every loop that can run longer than about
100 ms (per tile, per corner, per optimizer iteration). `check()` raises
Cancelled, which unwinds the job so its memory is released.
"""
from __future__ import annotations

import threading
import time

from registry.errors import DomeError


class Cancelled(DomeError):
    code = "CANCELLED"
    retry = "none"


class CancellationToken:
    def __init__(self, *, deadline: float | None = None) -> None:
        self._event = threading.Event()
        self._reason = ""
        self._deadline = deadline  # time.monotonic() value, or None

    def cancel(self, reason: str = "cancelled") -> None:
        self._reason = reason
        self._event.set()

    @property
    def cancelled(self) -> bool:
        if not self._event.is_set() and self._deadline is not None and time.monotonic() >= self._deadline:
            self.cancel("deadline exceeded")
        return self._event.is_set()

    @property
    def reason(self) -> str:
        return self._reason

    def check(self) -> None:
        if self.cancelled:
            raise Cancelled(f"job cancelled: {self._reason}", details={"reason": self._reason})

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)


NEVER = CancellationToken()  # a token nobody cancels, for callers without one
