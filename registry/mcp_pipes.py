"""MCP over a pair of pipe descriptors, read and written on the event loop itself.

The SDK's stdio transport wraps the descriptors in thread-backed files: every
frame read and every frame written is a hop to a worker thread and back. On a
busy machine each hop is a scheduler wake-up, which made a small tool call
through the front door cost several milliseconds more than the call itself.
These streams use non-blocking descriptors registered with the asyncio loop
(`connect_read_pipe` / `connect_write_pipe`) instead, so a frame costs one
read or write syscall. The MCP SDK is imported only when the streams open.
"""
from __future__ import annotations

import asyncio
import os
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Iterable

MAX_FRAME = 64 * 1024 * 1024
# The MCP worker's direct lane: a frame starting with this is not JSON-RPC (the SDK never sees it)
DIRECT_PREFIX = b'{"dome_direct":'
# the worker's short, bounded reads: run on its event loop, and over the direct lane when the host
# needs no job, progress or cancellation for them
DIRECT_TOOLS = frozenset({"list_cells", "describe_cell", "list_layers", "query_region", "measure_geometry",
                          "analyze_waveguide", "set_view", "close_session", "test_echo"})


@asynccontextmanager
async def pipe_streams(read_fd: int, write_fd: int, *, prelude: Iterable[bytes] = (), eof: bool = False,
                       on_line: Callable[[bytes], None] | None = None,
                       keep: Callable[[Any], bool] | None = None,
                       direct: tuple[bytes, Callable[[bytes], bytes]] | None = None,
                       ) -> AsyncIterator[tuple[Any, Any]]:
    """(read stream, write stream) of SessionMessages over two descriptors (both stay open after).

    `prelude`: frames already read by someone else, delivered first (`eof`: nothing more to read);
    `on_line` sees every inbound frame; `keep(message)` False drops an outbound message;
    `direct` = (prefix, handler): a frame starting with prefix is not MCP: handler(frame) runs on
    the loop and its answer (if any) is written back at once (the MCP worker's direct lane).
    """
    import anyio
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_FRAME, loop=loop)
    rfile = os.fdopen(os.dup(read_fd), "rb", buffering=0)
    wfile = os.fdopen(os.dup(write_fd), "wb", buffering=0)
    rtransport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), rfile)
    wtransport, wprotocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, wfile)
    writer = asyncio.StreamWriter(wtransport, wprotocol, None, loop)
    read_send, read_recv = anyio.create_memory_object_stream[Any](0)
    write_send, write_recv = anyio.create_memory_object_stream[Any](0)

    async def deliver(line: bytes) -> None:
        if on_line is not None:
            on_line(line)
        try:
            msg = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except Exception as exc:  # noqa: BLE001 - the session answers a malformed frame itself
            await read_send.send(exc)
            return
        await read_send.send(SessionMessage(msg))

    async def pump_in() -> None:
        async with read_send:
            for line in prelude:
                await deliver(line)
            while not eof:
                try:
                    line = await reader.readline()
                except (ValueError, asyncio.LimitOverrunError) as exc:  # a frame over the limit
                    await read_send.send(exc)
                    continue
                if not line:
                    return
                if direct is not None and line.startswith(direct[0]):
                    answer = direct[1](line)
                    if answer:
                        writer.write(answer)
                        await writer.drain()
                    continue
                if line.strip():
                    await deliver(line)

    async def pump_out() -> None:
        async with write_recv:
            async for msg in write_recv:
                if keep is not None and not keep(msg):
                    continue
                data = msg.message.model_dump_json(by_alias=True, exclude_unset=True)
                writer.write(data.encode() + b"\n")
                await writer.drain()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(pump_in)
            tg.start_soon(pump_out)
            try:
                yield read_recv, write_send
            finally:
                tg.cancel_scope.cancel()
    finally:
        rtransport.close()
        wtransport.close()
