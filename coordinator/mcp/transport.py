"""Transports: the host's own stdio, and the pipes to a worker process.

`host_stdio()` serves the public session on the private descriptors taken by
`registry.stdio_guard.claim_stdout()` (fd 1 already points at stderr).

`WorkerPipes` spawns a worker (`python -m worker_sdk.mcp_worker`) in its own
process group with stdin/stdout as the MCP pipes and stderr inherited (the
host's stderr), and exposes the process so the supervisor can kill its
whole tree.

Beside MCP, the same pipes carry the worker's direct lane (`direct_call`):
one line out, one line back, for the short KLayout reads that need no job,
progress or cancellation, without the SDK's client and server layers on
either end. A frame of the lane is never a JSON-RPC message, so the SDK
never sees one; when the worker dies, every call waiting on the lane fails
as a broken pipe, as an MCP call would.
"""
from __future__ import annotations

import json
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

from registry.mcp_pipes import DIRECT_PREFIX as _PREFIX
from registry.mcp_pipes import DIRECT_TOOLS  # noqa: F401 - the supervisor's list of direct-lane tools

DIRECT_PREFIX = _PREFIX.decode()


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
        self._send_lock = anyio.Lock()
        self._direct: dict[int, list] = {}  # id -> [answered event, answer or None]
        self._direct_seq = 0
        self._direct_open = False

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
        self._direct_open = True
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
                            if line.startswith(DIRECT_PREFIX):
                                self._answer(line)
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
                finally:
                    self._close_direct()

        async def writer() -> None:
            assert process.stdin is not None
            async with write_recv:
                try:
                    async for msg in write_recv:
                        data = msg.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                        async with self._send_lock:
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

    async def direct_call(self, tool: str, arguments: dict) -> tuple[bool, dict]:
        """(ok, result or ErrorObject) of a short tool over the direct lane; a dead worker raises
        anyio.BrokenResourceError. Abandoning the wait (cancellation) leaves the worker to finish it."""
        process = self.process
        if not self._direct_open or process is None or process.stdin is None:
            raise anyio.BrokenResourceError("the worker's pipe is closed")
        self._direct_seq += 1
        rid = self._direct_seq
        slot: list = [anyio.Event(), None]
        self._direct[rid] = slot
        frame = json.dumps({"dome_direct": rid, "tool": tool, "arguments": arguments}, separators=(",", ":"))
        try:
            async with self._send_lock:
                await process.stdin.send(frame.encode() + b"\n")
            await slot[0].wait()
        finally:
            self._direct.pop(rid, None)
        answer = slot[1]
        if answer is None:
            raise anyio.BrokenResourceError("the worker's pipe closed during the call")
        return bool(answer.get("ok")), answer.get("result") or {}

    def _answer(self, line: str) -> None:
        try:
            answer = json.loads(line)
            slot = self._direct.get(answer["dome_direct"])
        except (ValueError, KeyError, TypeError):
            return  # not ours any more (the caller gave up), or garbled: nothing waits for it
        if slot is not None and isinstance(answer, dict):
            slot[1] = answer
            slot[0].set()

    def _close_direct(self) -> None:
        self._direct_open = False
        for slot in list(self._direct.values()):
            slot[0].set()  # answer stays None: the caller raises a broken pipe

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
