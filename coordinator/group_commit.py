"""Group commit: the ledger appends of many concurrent callers in one transaction.

A read-only gateway call writes one record, its charge (`grant.call`). Giving
each its own durable transaction makes every call wait for a commit of its
own; under concurrency the calls queue on the writer lock. `GroupCommitter`
takes what callers submitted, appends it all in one transaction on its own
thread, commits once and then wakes every caller whose record that commit
held. A caller answers only after `submit(...)` returns, so an answered call's
charge is always durable: a crash before the commit loses calls nobody was
answered for, a crash after it can at most leave charges of calls whose
answer never left (over-counting, never under-counting, as a per-call
transaction would).

Each submission is a function `write(tx)` run inside the shared transaction;
it may raise a `DomeError` (a per-call refusal, for instance a grant revoked
in the ledger), which fails that submission alone: what it wrote must be
nothing, and the other submissions still commit. Any other error rolls the
whole batch back and is raised to every caller of that batch.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable

from registry.errors import DomeError

MAX_BATCH = 256


class _Pending:
    __slots__ = ("write", "result", "error", "done")

    def __init__(self, write: Callable[[Any], Any]) -> None:
        self.write = write
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()


class GroupCommitter:
    def __init__(self, ledger: Any, *, max_batch: int = MAX_BATCH, name: str = "dome-group-commit") -> None:
        self.ledger = ledger  # anything with transaction() -> context manager yielding a tx
        self.max_batch = max_batch
        self._queue: deque[_Pending] = deque()
        self._cv = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False
        self.commits = 0
        self.records = 0

    def submit(self, write: Callable[[Any], Any]) -> Any:
        """Run write(tx) in the next group transaction; return its result once that
        transaction has committed (or raise its error)."""
        p = _Pending(write)
        with self._cv:
            if self._closed:
                raise RuntimeError("group committer is closed")
            if not self._started:
                self._started = True
                self._thread.start()
            self._queue.append(p)
            self._cv.notify()
        p.done.wait()
        if p.error is not None:
            raise p.error
        return p.result

    def close(self, timeout: float = 10.0) -> None:
        """Commit what is queued, then stop the thread."""
        with self._cv:
            self._closed = True
            self._cv.notify()
        if self._started:
            self._thread.join(timeout)

    def _take(self) -> list[_Pending] | None:
        with self._cv:
            while not self._queue and not self._closed:
                self._cv.wait()
            if not self._queue:
                return None
            n = min(len(self._queue), self.max_batch)
            return [self._queue.popleft() for _ in range(n)]

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            self._commit(batch)

    def _commit(self, batch: list[_Pending]) -> None:
        try:
            with self.ledger.transaction() as tx:
                for p in batch:
                    try:
                        p.result = p.write(tx)
                    except DomeError as err:  # refused alone; it wrote nothing
                        p.error = err
        except BaseException as exc:  # noqa: BLE001 - the batch rolled back: every caller hears why
            for p in batch:
                p.error = exc
        else:
            self.commits += 1
            self.records += sum(1 for p in batch if p.error is None)
        for p in batch:
            p.done.set()

