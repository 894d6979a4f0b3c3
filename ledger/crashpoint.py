"""A test hook for crash tests: end the process right after a chosen event is durable.

    DOME_CRASH_AFTER_TOPIC=<topic>[:<n>]

makes the process that writes the ledger exit at once (`os._exit(137)`,
the status of a kill -9: no cleanup, no finally blocks) right after the
transaction that appended the n-th event (default 1st) of <topic> has
committed. Crash tests use it to stop `dome run` at every boundary instead
of after random delays. Unset (always, outside tests) it costs one `None`
check per commit.
"""
from __future__ import annotations

import os
from typing import Iterable

ENV = "DOME_CRASH_AFTER_TOPIC"
EXIT_STATUS = 137


class CrashPoint:
    def __init__(self, topic: str, n: int = 1) -> None:
        self.topic, self.n, self.seen = topic, n, 0

    def after_commit(self, topics: Iterable[str]) -> None:
        self.seen += sum(1 for t in topics if t == self.topic)
        if self.seen >= self.n:
            os._exit(EXIT_STATUS)


def from_env() -> CrashPoint | None:
    spec = os.environ.get(ENV)
    if not spec:
        return None
    topic, _, n = spec.partition(":")
    return CrashPoint(topic, int(n) if n else 1)
