"""SIGINT and SIGTERM cancel a run (in the main thread only; elsewhere nothing is installed)."""
from __future__ import annotations

import signal
import threading
from typing import Any, Callable


def install_cancel_signals(cancel: Callable[[str], None]) -> dict[int, Any]:
    """Route SIGINT/SIGTERM to `cancel(reason)`; returns the handlers they replaced."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    old = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        old[sig] = signal.signal(sig, lambda s, f: cancel(f"signal {signal.Signals(s).name}"))
    return old


def restore_signals(old: dict[int, Any]) -> None:
    for sig, h in old.items():
        signal.signal(sig, h)
