"""Keep fd 1 for protocol frames only (MCP over stdio).

`claim_stdout()` must run before anything else a process imports or starts:
it moves the real stdout to a private, close-on-exec descriptor that only the
MCP transport writes to, and points fd 1 (and `sys.stdout`) at stderr. From
then on a stray `print`, a noisy import, a C library writing to fd 1 or a child
process that inherits fd 1 all land on stderr; none can corrupt the wire.

Shared by the MCP host (coordinator) and MCP workers (worker_sdk); it is
plain fd plumbing with no dome dependencies.
"""
from __future__ import annotations

import fcntl
import os
import sys
from dataclasses import dataclass

_CLAIM: "StdoutClaim | None" = None


@dataclass(frozen=True)
class StdoutClaim:
    protocol_fd: int  # the real stdout, private and close-on-exec
    stdin_fd: int  # the real stdin, private and close-on-exec (fd 0 reads /dev/null)


def claim_stdout() -> StdoutClaim:
    """Divert fd 1 to stderr; return the private descriptor of the real stdout. Idempotent."""
    global _CLAIM
    if _CLAIM is not None:
        return _CLAIM
    try:
        sys.stdout.flush()
    except Exception:  # pragma: no cover - a closed stdout
        pass
    private = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    private_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    os.dup2(2, 1)  # fd 1 now writes to stderr, for us and every child we start
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # children cannot read (steal) protocol input either
    os.close(devnull)
    # Python-level writers follow fd 1 (line-buffered so ordering on stderr stays sane).
    sys.stdout = os.fdopen(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    _CLAIM = StdoutClaim(protocol_fd=private, stdin_fd=private_in)
    return _CLAIM
