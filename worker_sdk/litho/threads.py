"""How many CPU threads the engine's torch ops use.

torch picks one thread per core of the machine by default; a worker that
shares the machine with others then oversubscribes it (on a loaded 2-core
machine two threads made ILT several times slower than one). The engine
instead uses the cores it was granted:

1. an explicit count (`threads` in a request, `--threads` on the CLI);
2. else `$DOME_WORKER_CPUS`, the cores an executor grants one worker;
3. else the CPUs this process may run on (`os.sched_getaffinity`).
"""
from __future__ import annotations

import os

from .errors import BadRequest

ENV_GRANTED = "DOME_WORKER_CPUS"


def granted_cpus() -> int:
    raw = os.environ.get(ENV_GRANTED, "").strip()
    if raw:
        try:
            n = int(raw)
        except ValueError:
            n = 0
        if n < 1:
            raise BadRequest(f"${ENV_GRANTED} must be a positive integer, got {raw!r}", code="LITHO_BAD_THREADS")
        return n
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - no affinity API on this platform
        return max(1, os.cpu_count() or 1)


def choose_threads(requested: int | None = None) -> int:
    """The thread count to use: the request's, else the granted cores."""
    if requested is not None:
        if int(requested) < 1:
            raise BadRequest("threads must be >= 1", code="LITHO_BAD_THREADS", details={"threads": requested})
        return int(requested)
    return granted_cpus()


def apply_threads(requested: int | None = None) -> int:
    """Set torch's intra-op thread count for this process and return it."""
    import torch

    n = choose_threads(requested)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n
