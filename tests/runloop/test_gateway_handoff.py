"""The gateway's hop to a handler thread (coordinator/gateway/handoff.py)."""
from __future__ import annotations

import asyncio
import threading

import pytest

from coordinator.gateway.handoff import HandlerPool


def test_calls_run_in_handler_threads_concurrently_up_to_the_size():
    pool = HandlerPool(3, "t-call")
    gate = threading.Barrier(3, timeout=10)
    names: list[str] = []

    def call(i: int) -> int:
        names.append(threading.current_thread().name)
        gate.wait()  # three calls must be running at once to pass
        return i * 2

    async def main() -> list[int]:
        return await asyncio.gather(*(pool.run(lambda i=i: call(i)) for i in range(3)))
    assert asyncio.run(main()) == [0, 2, 4]
    assert pool.threads == 3 and all(n.startswith("t-call-") for n in names)
    assert threading.current_thread().name not in names

    async def more() -> list[int]:  # finished threads take the next calls: no new thread
        return [await pool.run(lambda: 7) for _ in range(20)]
    assert asyncio.run(more()) == [7] * 20 and pool.threads == 3
    pool.shutdown()


def test_calls_past_the_size_wait_for_a_thread():
    pool = HandlerPool(2, "t-call")
    running = 0
    most = 0
    lock = threading.Lock()

    def call() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        threading.Event().wait(0.02)
        with lock:
            running -= 1

    async def main() -> None:
        await asyncio.gather(*(pool.run(call) for _ in range(8)))
    asyncio.run(main())
    assert most == 2 and pool.threads == 2
    pool.shutdown()


def test_an_exception_reaches_the_caller_and_a_shut_pool_takes_nothing():
    pool = HandlerPool(1, "t-call")

    def boom() -> None:
        raise KeyError("x")

    async def main() -> None:
        with pytest.raises(KeyError):
            await pool.run(boom)
        assert await pool.run(lambda: 1) == 1
    asyncio.run(main())
    pool.shutdown()
    with pytest.raises(RuntimeError):
        asyncio.run(pool.run(lambda: 1))
    with pytest.raises(ValueError):
        HandlerPool(0, "t")
