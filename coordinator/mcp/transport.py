"""Transports: the host's own stdio, and the pipes to a worker process.

`host_stdio()` serves the public session on the private descriptors taken by
`registry.stdio_guard.claim_stdout()` (fd 1 already points at stderr).

`WorkerPipes` spawns a worker (`python -m worker_sdk.mcp_worker`) in its own
process group with stdin/stdout as the MCP pipes and stderr inherited (the
host's stderr), and exposes the process so the supervisor can kill its
whole tree.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import asynccontextmanager, suppress
from typing import AsyncIterator

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.text import TextReceiveStream

from mcp.shared.message import SessionMessage
from registry.stdio_guard import claim_stdout


@asynccontextmanager
async def host_stdio() -> AsyncIterator[tuple[object, object]]:
    from registry.mcp_pipes import pipe_streams

    claim = claim_stdout()
    async with pipe_streams(claim.stdin_fd, claim.protocol_fd) as streams:
        yield streams


class WorkerPipes:
    """An MCP client transport over a spawned worker's stdin/stdout."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str | None = None) -> None:
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.process: anyio.abc.Process | None = None
        self._tg: anyio.abc.TaskGroup | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def kill(self) -> None:
        """SIGKILL the worker's whole process group (the worker and anything it started)."""
        if self.process is None or self.process.returncode is not None:
            return
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)

    @asynccontextmanager
    async def streams(self) -> AsyncIterator[tuple[object, object]]:
        process = await anyio.open_process(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=None, env=self.env, cwd=self.cwd, start_new_session=True)
        self.process = process
        read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](16)
        write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](16)

        async def reader() -> None:
            assert process.stdout is not None
            buffer = ""
            async with read_send:
                try:
                    async for chunk in TextReceiveStream(process.stdout, encoding="utf-8", errors="replace"):
                        lines = (buffer + chunk).split("\n")
                        buffer = lines.pop()
                        for line in lines:
                            if not line.strip():
                                continue
                            try:
                                msg = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                                await read_send.send(SessionMessage(msg))
                            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                                return
                            except Exception as exc:  # a non-protocol line: a protocol fault
                                await read_send.send(exc)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                    pass

        async def writer() -> None:
            assert process.stdin is not None
            async with write_recv:
                try:
                    async for msg in write_recv:
                        data = msg.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                        await process.stdin.send(data.encode())
                except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                    pass

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                tg.start_soon(writer)
                try:
                    yield read_recv, write_send
                finally:
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self._stop(process)

    async def _stop(self, process: anyio.abc.Process) -> None:
        if process.stdin is not None:
            with suppress(Exception):
                await process.stdin.aclose()
        with anyio.move_on_after(0.5):
            while process.returncode is None:
                await anyio.sleep(0.01)
        if process.returncode is None:
            self.kill()
            with anyio.move_on_after(2):
                await process.wait()
        else:
            # the worker exited; reap anything it left in its group
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        for s in (process.stdout,):
            if s is not None:
                with suppress(Exception):
                    await s.aclose()


def worker_argv() -> list[str]:
    return [sys.executable, "-m", "worker_sdk.mcp_worker"]
