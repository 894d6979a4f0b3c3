"""The hop from the gateway's event loop to a handler thread and back.

The gateway's calls are synchronous (the ledger is), so each runs in a thread
while the event loop goes on serving. `HandlerPool.run(fn)` queues the call
and awaits an asyncio future that the handler thread settles with one
`call_soon_threadsafe`; the loop's side is a future, a lock and a queue put.
(AnyIO's `to_thread.run_sync` and `loop.run_in_executor` do the same with a
capacity limiter, cancel scopes or a concurrent.futures.Future chained to the
asyncio one, which costs the loop's thread several times as much per call.)
Threads are started as calls need them, up to `size`; one that finished its
call takes the next from the queue.
"""
from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any, Callable, TypeVar

T = TypeVar("T")


def _settle(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if fut.cancelled():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


class HandlerPool:
    def __init__(self, size: int, name: str) -> None:
        if size < 1:
            raise ValueError("a handler pool needs at least one thread")
        self.size = size
        self.name = name
        self._queue: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], Callable[[], Any]] | None] \
            = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads that finished a call and wait for the next
        self._closed = False

    async def run(self, fn: Callable[[], T]) -> T:
        """fn() in a handler thread; its result (or exception) here."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the handler pool is shut down")
            if self._idle:
                self._idle -= 1
            elif len(self._threads) < self.size:
                t = threading.Thread(target=self._work, name=f"{self.name}-{len(self._threads)}", daemon=True)
                self._threads.append(t)
                t.start()
        self._queue.put((loop, fut, fn))
        return await fut

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            loop, fut, fn = item
            result: Any = None
            error: BaseException | None = None
            try:
                result = fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                error = exc
            with self._lock:
                self._idle += 1
            try:
                loop.call_soon_threadsafe(_settle, fut, result, error)
            except RuntimeError:  # the loop has closed: nobody waits for this answer
                pass
            del item, fut, fn, result, error

    def shutdown(self) -> None:
        """Let every thread finish its call and end; no new calls are taken."""
        with self._lock:
            self._closed = True
            n = len(self._threads)
        for _ in range(n):
            self._queue.put(None)

    @property
    def threads(self) -> int:
        return len(self._threads)
