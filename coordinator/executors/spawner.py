"""Starting worker processes off the run loop's thread.

`Spawner(threads)` runs start jobs (a cgroup set-up and a `Popen`) on a few
long-lived threads, fed by a bounded queue: `submit` returns at once, or
waits while the queue is full (the run loop then slows down rather than
queueing without bound). With `threads=0` a job runs on the caller's thread.

The threads live as long as the executor. That matters: a child started with
a parent-death signal (`setpriv --pdeathsig`, bwrap's `--die-with-parent`)
receives it when the *thread* that forked it ends, not only the process, so a
spawner thread may end only after every worker it started is gone.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Callable

QUEUE_PER_THREAD = 16


class Spawner:
    def __init__(self, threads: int = 1, *, name: str = "dome-spawn") -> None:
        self.threads = max(0, int(threads))
        self._q: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=QUEUE_PER_THREAD * max(1, self.threads))
        self._workers = [threading.Thread(target=self._serve, name=f"{name}-{i}", daemon=True)
                         for i in range(self.threads)]
        self.cpu_s = 0.0  # thread CPU the jobs took (what the caller's thread no longer spends)
        self._cpu_lock = threading.Lock()
        for t in self._workers:
            t.start()

    def submit(self, job: Callable[[], None]) -> None:
        """Run `job` on a spawner thread (it must not raise: it records its own failure)."""
        if not self._workers:
            job()
            return
        self._q.put(job)

    def _serve(self) -> None:
        while True:
            job = self._q.get()
            if job is None:
                return
            c0 = time.thread_time()
            try:
                job()
            except Exception:  # noqa: BLE001 - a job records its own failure; this only keeps the thread alive
                pass
            with self._cpu_lock:
                self.cpu_s += time.thread_time() - c0

    def close(self, timeout: float = 5.0) -> None:
        """Stop the threads once the queued jobs ran (call after every worker they started is gone)."""
        for _ in self._workers:
            self._q.put(None)
        for t in self._workers:
            t.join(timeout)
        self._workers = []

