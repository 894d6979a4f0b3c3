"""A disposable MCP worker: the heavy tools, served over stdio pipes to the host.

    python -m worker_sdk.mcp_worker

The host (coordinator/mcp) owns the public MCP session and validates every
request against the registry contracts; this process only runs the domain
functions (`worker_sdk.litho.api`, `worker_sdk.klayout_tools.api`) in
threads, each with a CancellationToken that the host's cancellation reaches,
and reports progress. Its fd 1 is claimed before anything is imported, so
prints, noisy imports and child processes never reach the protocol pipe.

Hidden host-facing tools (not in any contract):
  dome_job_state {job_id, wait_s}   wait up to wait_s for a cancelled job's thread to stop
  dome_probe {tool, arguments}      the ProbeRequired probe: did an earlier attempt take effect?
  dome_session_restore {...}        re-create a KLayout session under its own id after a restart
"""
from __future__ import annotations

if __name__ == "__main__":  # claim fd 1 before any other import can print
    from registry.stdio_guard import claim_stdout

    claim_stdout()

import importlib
import inspect
import os
import sys
import threading
import time
import traceback
from typing import Any, Callable

from registry.mcp_pipes import DIRECT_PREFIX, DIRECT_TOOLS

TEST_TOOLS_ENV = "DOME_MCP_TEST_TOOLS"

# tool name -> "module:function" (imported on first use; the worker starts fast)
TOOLS: dict[str, str] = {
    "evaluate": "worker_sdk.litho.api:evaluate",
    "optimize": "worker_sdk.litho.api:optimize",
    "simulate": "worker_sdk.litho.api:simulate",
    **{name: f"worker_sdk.klayout_tools.api:{name}" for name in (
        "open_layout", "close_session", "list_cells", "describe_cell", "list_layers", "query_region",
        "measure_geometry", "analyze_waveguide", "set_view", "render_view", "run_drc_script",
        "extract_markers")},
    "dome_session_restore": "worker_sdk.klayout_tools.api:restore_session",
}
# short, bounded reads served on the worker's event loop itself (no thread hop); the host sends
# these over the direct lane (run_direct) when it needs no job, progress or cancellation for them
INLINE = DIRECT_TOOLS
TEST_TOOLS: dict[str, str] = {name: f"worker_sdk.testing.mcp_tools:{name}" for name in (
    "test_echo", "test_slow", "test_crash_convergent", "test_crash_probe", "test_crash_never", "test_noisy",
    "test_session_open", "test_session_read", "test_crash_now")}
# ProbeRequired tools: tool -> "module:probe_function" (probe(arguments) -> {"effect": "absent"|"present", ...})
PROBES: dict[str, str] = {
    "test_crash_probe": "worker_sdk.testing.mcp_tools:probe_crash_probe",
    "close_session": "worker_sdk.mcp_worker:_probe_close_session",
}


def _probe_close_session(arguments: dict[str, Any]) -> dict[str, Any]:
    # A fresh worker holds no sessions, so a replayed close can only report the session missing.
    return {"effect": "present", "result": {"session_id": arguments.get("session_id"), "closed": False,
                                            "artifact_dir_deleted": False}}


_RESOLVED: dict[str, tuple[Callable[..., Any], frozenset[str]]] = {}


def _resolve(ref: str) -> Callable[..., Any]:
    module, _, func = ref.partition(":")
    return getattr(importlib.import_module(module), func)


def _tool_function(ref: str) -> tuple[Callable[..., Any], frozenset[str]]:
    """(function, its parameter names), looked up once per tool: not on every call."""
    hit = _RESOLVED.get(ref)
    if hit is None:
        fn = _resolve(ref)
        try:
            params = frozenset(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            params = frozenset()
        hit = _RESOLVED[ref] = (fn, params)
    return hit


def _engine_versions() -> dict[str, str]:
    out = {"python": ".".join(map(str, sys.version_info[:3]))}
    for name in ("torch", "klayout"):
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "__version__", None):
            out[name] = str(mod.__version__)
    return out


def _unavailable(name: str, exc: ImportError) -> dict[str, Any]:
    return {"code": "TOOL_UNAVAILABLE", "message": f"{name} is not installed in this worker "
            f"({type(exc).__name__}: {getattr(exc, 'name', '') or exc})", "details": {},
            "hints": ["install the engine this tool needs"], "retry": "none"}


def _failure(name: str, exc: BaseException) -> dict[str, Any]:
    """The ErrorObject of a tool that raised: its own when typed, never a traceback on the pipe."""
    from registry.errors import DomeError

    if isinstance(exc, DomeError):  # Cancelled included
        return exc.to_object()
    if isinstance(exc, MemoryError):
        return {"code": "RESOURCE_EXHAUSTED", "message": "out of memory", "details": {},
                "hints": ["use a smaller layout or tile size"], "retry": "heavy"}
    traceback.print_exception(exc, file=sys.stderr)
    return {"code": "ENGINE_ERROR", "message": f"{name} failed: {type(exc).__name__}",
            "details": {}, "hints": ["see the worker's stderr log"], "retry": "none"}


_POLICY: list[Any] = []  # [PathPolicy | None], read from the environment on first use


def _checked(name: str, args: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """The host's path policy, applied again where the files are opened: (arguments, new files made).

    Each new output file is created here with O_EXCL | O_NOFOLLOW before the tool writes it, so a
    file or link planted after the host's check is refused rather than written through."""
    from registry.pathpolicy import OVERWRITE_FIELD, TOOL_PATHS, PathPolicy, apply, reserve

    if name not in TOOL_PATHS:
        return args, []
    if not _POLICY:
        _POLICY.append(PathPolicy.from_env())
    policy = _POLICY[0]
    if policy is None:  # a worker started by hand, without a host: the tools' own checks only
        return {k: v for k, v in args.items() if k != OVERWRITE_FIELD}, []
    overwrite = bool(args.get(OVERWRITE_FIELD))
    out, new = apply(policy, name, args)
    made = []
    for path in new:
        existed = os.path.lexists(path)
        reserve(path, overwrite=overwrite)
        if not existed:
            made.append(path)
    return out, made


def _unreserve(made: list[Any]) -> None:
    """A tool that failed leaves none of the empty files reserved for it."""
    for path in made:
        try:
            if path.stat().st_size == 0:
                path.unlink()
        except OSError:
            pass


def _finish(name: str, args: dict[str, Any], result: Any) -> tuple[bool, dict[str, Any]]:
    """(ok, the result stamped with the standard provenance block) or (False, ErrorObject)."""
    from registry.provenance import stamp

    if not isinstance(result, dict):
        return False, {"code": "ENGINE_ERROR", "message": f"{name} returned {type(result).__name__}",
                       "details": {}, "hints": [], "retry": "none"}
    return True, stamp(result, args, tool=name, engine_versions=_engine_versions())


def run_direct(tools: dict[str, str], line: bytes) -> bytes:
    """Answer one frame of the direct lane: a short INLINE tool, run here, without the MCP layers.

    The host sends `{"dome_direct": N, "tool": ..., "arguments": {...}}` on the same pipe as MCP
    (never a JSON-RPC message, so the SDK never sees it) for the bounded KLayout reads; the answer
    is `{"dome_direct": N, "ok": bool, "result": ...}`, the same result or ErrorObject the MCP
    path gives. These tools take no progress and are never jobs, so nothing else is needed."""
    import json

    from worker_sdk.cancel import CancellationToken

    try:
        frame = json.loads(line)
        rid, name, args = frame["dome_direct"], str(frame["tool"]), dict(frame.get("arguments") or {})
    except (ValueError, KeyError, TypeError):
        return b""  # not a frame of ours: dropped (the host only sends well-formed ones)
    ref = tools.get(name) if name in INLINE else None
    if ref is None:
        ok, obj = False, {"code": "UNKNOWN_TOOL", "message": f"no direct tool {name}", "details": {},
                          "hints": [], "retry": "none"}
    else:
        try:
            fn, sig = _tool_function(ref)
            kwargs: dict[str, Any] = {}
            if "token" in sig:
                kwargs["token"] = CancellationToken()
            if "progress" in sig:
                kwargs["progress"] = _Progress()
            args, _ = _checked(name, args)
            ok, obj = _finish(name, args, fn(args, **kwargs))
        except ImportError as exc:
            ok, obj = False, _unavailable(name, exc)
        except Exception as exc:  # noqa: BLE001 - shaped like the MCP path's
            ok, obj = False, _failure(name, exc)
    return json.dumps({"dome_direct": rid, "ok": ok, "result": obj}, separators=(",", ":")).encode() + b"\n"


class _Progress:
    """Thread-safe latest progress, forwarded to the host by an async task."""

    def __init__(self) -> None:
        self.value = 0.0
        self.message = ""
        self.seq = 0
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        """progress(fraction[, message]) or the litho engine's progress(done, total, loss)."""
        if len(args) == 3 and isinstance(args[0], int) and isinstance(args[1], int):
            done, total, loss = args
            fraction, message = (done / total if total else 0.0), f"iteration {done}/{total} loss {float(loss):.6g}"
        else:
            fraction = float(args[0]) if args else float(kwargs.get("fraction", 0.0))
            message = str(args[1]) if len(args) > 1 else str(kwargs.get("message", ""))
        with self._lock:
            if fraction > self.value:
                self.value = float(fraction)
                self.message = message
                self.seq += 1


def build_server():  # -> mcp.server.lowlevel.Server
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server

    from worker_sdk.cancel import CancellationToken

    tools = dict(TOOLS)
    if os.environ.get(TEST_TOOLS_ENV) == "1":
        tools.update(TEST_TOOLS)
    running: dict[str, threading.Event] = {}  # job_id -> set when its thread has stopped

    def error_result(obj: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"{obj['code']}: {obj['message']}")],
                                    structured_content=obj, is_error=True)

    def ok_result(obj: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(content=[], structured_content=obj, is_error=False)

    async def list_tools(ctx, params) -> types.ListToolsResult:
        names = sorted(tools) + ["dome_job_state", "dome_probe"]
        return types.ListToolsResult(tools=[types.Tool(name=n, input_schema={"type": "object"}) for n in names])

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        name, args = params.name, dict(params.arguments or {})
        if name in ("dome_job_state", "dome_probe"):
            return ok_result(await _host_call(name, args, running))
        ref = tools.get(name)
        if ref is None:
            return error_result({"code": "UNKNOWN_TOOL", "message": f"worker has no tool {name}", "details": {},
                                 "hints": [], "retry": "none"})
        try:
            fn, sig = _tool_function(ref)
        except ImportError as exc:
            return error_result(_unavailable(name, exc))
        meta = params.meta or {}
        job_id = str(meta.get("dome/job_id") or f"anon-{id(params)}")
        token = CancellationToken()
        try:
            result = await _run_tool(ctx, name, fn, sig, args, token=token, running=running, job_id=job_id)
        except anyio.get_cancelled_exc_class():
            token.cancel("cancelled by the host")
            raise
        except Exception as exc:  # noqa: BLE001 - shaped into an ErrorObject
            return error_result(_failure(name, exc))
        ok, obj = _finish(name, args, result)
        return ok_result(obj) if ok else error_result(obj)

    server = Server("dome-worker", version="1", on_list_tools=list_tools, on_call_tool=call_tool)
    server.dome_tools = tools  # type: ignore[attr-defined]  # the direct lane serves the same table
    return server


async def _host_call(name: str, args: dict[str, Any], running: dict[str, threading.Event]) -> dict[str, Any]:
    """The host's own calls: `dome_job_state` (has a job's thread stopped, waiting up to wait_s) and
    `dome_probe` (a tool's side effect for these arguments)."""
    import anyio

    if name == "dome_job_state":
        ev = running.get(str(args.get("job_id")))
        if ev is None:
            return {"state": "unknown"}
        stopped = await anyio.to_thread.run_sync(ev.wait, float(args.get("wait_s", 0.0)))
        return {"state": "stopped" if stopped else "running"}
    ref = PROBES.get(str(args.get("tool")))
    if ref is None:
        return {"effect": "unknown"}
    return _resolve(ref)(dict(args.get("arguments") or {}))


async def _run_tool(ctx: Any, name: str, fn: Callable[..., Any], sig: Any, args: dict[str, Any], *,
                    token: Any, running: dict[str, threading.Event], job_id: str) -> Any:
    """One tool call: on a worker thread (inline for the short INLINE readers), its progress
    forwarded to the host while it runs; returns its result or raises what it raised. `running`
    holds the job until its thread has stopped."""
    import anyio

    progress = _Progress()
    stopped = threading.Event()
    running[job_id] = stopped
    kwargs: dict[str, Any] = {}
    if "token" in sig:
        kwargs["token"] = token
    if "progress" in sig:
        kwargs["progress"] = progress

    def run() -> tuple[bool, Any]:
        made: list[Any] = []
        try:
            call_args, made = _checked(name, args)  # the path policy again, where the files are opened
            return True, fn(call_args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the event loop, outside the task group
            _unreserve(made)
            return False, exc
        finally:
            stopped.set()

    sent = [0]

    async def flush() -> None:
        if progress.seq != sent[0]:
            sent[0] = progress.seq
            await ctx.session.report_progress(progress.value, 1.0, progress.message or None)

    async def forward() -> None:
        while True:  # the latest update every 50 ms: a fast loop cannot flood the pipe
            await anyio.sleep(0.05)
            await flush()

    try:
        if name in INLINE:
            # short KLayout readers: a thread hop would only add a context switch per call (they
            # hold the GIL either way); long or cancellable tools keep the loop free
            ok, result = run()
        else:
            async with anyio.create_task_group() as tg:
                tg.start_soon(forward)
                try:
                    ok, result = await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
                finally:
                    tg.cancel_scope.cancel()
            if ok:
                await flush()  # the last phase's update, before the result
        if not ok:
            raise result
        return result
    finally:
        if stopped.is_set():
            running.pop(job_id, None)


async def _serve() -> None:
    from registry.mcp_pipes import pipe_streams
    from registry.stdio_guard import claim_stdout

    claim = claim_stdout()
    server = build_server()
    tools = server.dome_tools  # type: ignore[attr-defined]
    direct = (DIRECT_PREFIX, lambda line: run_direct(tools, line))
    async with pipe_streams(claim.stdin_fd, claim.protocol_fd, direct=direct) as (r, w):
        await server.run(r, w, server.create_initialization_options())


def main() -> int:
    import anyio

    started = time.monotonic()
    try:
        anyio.run(_serve)
    except KeyboardInterrupt:
        pass
    print(f"dome-worker {os.getpid()}: exit after {time.monotonic() - started:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
