"""Supervision of disposable worker processes.

One worker generation at a time: a process started by `WorkerPipes`, driven
by a real MCP SDK client (initialize handshake over the pipes). A crash,
a broken pipe or a protocol violation ends the generation; the next call
starts generation + 1. The supervisor never decides about replay: it turns
every failure into a typed `Fault` and leaves the contract to the dispatcher.
"""
from __future__ import annotations

import os
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Awaitable, Callable

import anyio
import anyio.abc
from mcp import Client
from mcp.shared.exceptions import MCPError

from registry.errors import DomeError, ErrorObject
from registry.pathpolicy import PathPolicy

from .faults import Fault, FaultCategory
from .telemetry import Telemetry
from .transport import DIRECT_TOOLS, WorkerPipes
from .worker_sandbox import worker_command, worker_env

REPO_ROOT = Path(__file__).resolve().parents[2]
ProgressCb = Callable[[float, float | None, str | None], Awaitable[None]]


class WorkerError(Exception):
    """The worker ran the tool and returned a domain error (an ErrorObject)."""

    def __init__(self, obj: dict[str, Any]) -> None:
        super().__init__(obj.get("message"))
        self.obj = obj


class _Generation:
    def __init__(self, number: int, pipes: WorkerPipes) -> None:
        self.number = number
        self.pipes = pipes
        self.client: Client | None = None
        self.stop = anyio.Event()
        self.ready = anyio.Event()
        self.ended = anyio.Event()
        self.start_error: BaseException | None = None
        self.dead = False
        self.inflight = 0
        self.draining = False
        self.idle = anyio.Event()

    @property
    def alive(self) -> bool:
        p = self.pipes.process
        return (not self.dead and not self.draining and self.client is not None and not self.ended.is_set()
                and p is not None and p.returncode is None)


class WorkerSupervisor:
    def __init__(self, telemetry: Telemetry, *, env: dict[str, str] | None = None,
                 call_timeout_s: float = 600.0, start_timeout_s: float = 30.0,
                 policy: PathPolicy | None = None) -> None:
        self.telemetry = telemetry
        self.extra_env = dict(env or {})
        self.policy = policy  # the path policy whose roots the worker's sandbox binds
        self.call_timeout_s = call_timeout_s
        # the worker's direct lane for its short reads; DOME_MCP_DIRECT=0 sends them through MCP too
        self.direct = os.environ.get("DOME_MCP_DIRECT", "1") != "0"
        self.start_timeout_s = start_timeout_s
        self.generation = 0
        self._current: _Generation | None = None
        self._lock = anyio.Lock()
        self._tg: anyio.abc.TaskGroup | None = None
        self._stack: AsyncExitStack | None = None
        self._generations: list[_Generation] = []

    # lifecycle -----------------------------------------------------------
    async def __aenter__(self) -> "WorkerSupervisor":
        self._stack = AsyncExitStack()
        self._tg = await self._stack.enter_async_context(anyio.create_task_group())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        gens = [g for g in self._generations if not g.ended.is_set()]
        for gen in gens:
            gen.stop.set()
        if self._stack is not None:
            ended = True
            with anyio.CancelScope(shield=True):
                for gen in gens:
                    with anyio.move_on_after(1.0):
                        await gen.ended.wait()
                    if not gen.ended.is_set():
                        gen.pipes.kill()  # a disposable worker: no more grace than that
                        with anyio.move_on_after(2.0):
                            await gen.ended.wait()
                    ended = ended and gen.ended.is_set()
            if not ended and self._tg is not None:
                self._tg.cancel_scope.cancel()
            await self._stack.aclose()
        self._tg = None

    def _env(self) -> dict[str, str]:
        env = worker_env({**os.environ, **self.extra_env})  # never the host's token or another secret
        env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PYTHONUNBUFFERED"] = "1"
        return env

    async def _run_generation(self, gen: _Generation) -> None:
        try:
            async with gen.pipes.streams() as streams:
                async with Client(_Streams(streams), mode="legacy", cache=None) as client:
                    gen.client = client
                    gen.ready.set()
                    with anyio.CancelScope() as scope:
                        async with anyio.create_task_group() as tg:
                            async def watch() -> None:
                                p = gen.pipes.process
                                while p is not None and p.returncode is None:
                                    await anyio.sleep(0.05)
                                scope.cancel()
                            tg.start_soon(watch)
                            await gen.stop.wait()
                            scope.cancel()
        except BaseException as exc:  # noqa: BLE001 - recorded; the next call sees a dead generation
            gen.start_error = exc
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                raise
        finally:
            gen.client = None
            gen.ended.set()
            gen.ready.set()

    async def rollout(self, drain_timeout_s: float = 300.0) -> dict[str, Any]:
        """Hot reinstall: new calls go to a fresh generation while the old one drains, then retires.

        In-flight calls on the old worker finish normally (no replay needed); after
        `drain_timeout_s` the old worker is killed and its calls fail as rollout disruption.
        """
        old = self._current
        self.telemetry.rollout = "rolling"
        self.telemetry._emit({"event": "rollout", "state": "rolling", "from_generation": old.number if old else None})
        disrupted = 0
        if old is not None and old.alive:
            old.draining = True  # _ensure now starts a new generation
            await self._ensure()
            if old.inflight:
                old.idle = anyio.Event()
                with anyio.move_on_after(drain_timeout_s):
                    await old.idle.wait()
            disrupted = old.inflight
            if disrupted:
                old.rollout_killed = True  # type: ignore[attr-defined]
            await self._retire(old)
        else:
            await self._ensure()
        self.telemetry.rollout = "stable"
        self.telemetry._emit({"event": "rollout", "state": "stable", "generation": self.generation,
                              "disrupted_calls": disrupted})
        return {"generation": self.generation, "disrupted_calls": disrupted}

    async def ensure(self) -> int:
        """Start a worker if none is alive; return the current generation."""
        return (await self._ensure()).number

    async def _ensure(self) -> _Generation:
        gen = self._current
        if gen is not None and gen.alive:
            return gen
        async with self._lock:
            gen = self._current
            if gen is not None and gen.alive:
                return gen
            if self._tg is None:
                raise Fault(FaultCategory.INVARIANT_BREACH, "worker supervisor is not running")
            if gen is not None and not gen.draining:
                await self._retire(gen)
            number = self.generation + 1
            env = self._env()
            try:
                argv = worker_command(self.policy, env)
            except DomeError as exc:  # SandboxUnavailable: no worker rather than an unconfined one
                raise Fault(FaultCategory.PROCESS, f"worker cannot start: {exc.message}",
                            details={"generation": number, "reason": exc.code},
                            hints=["install bubblewrap, or set DOME_MCP_SANDBOX=none to run workers unconfined"]
                            ) from None
            gen = _Generation(number, WorkerPipes(argv, env, cwd=os.getcwd()))
            self._generations.append(gen)
            self._tg.start_soon(self._run_generation, gen)
            with anyio.move_on_after(self.start_timeout_s):
                await gen.ready.wait()
            if gen.client is None:
                gen.stop.set()
                raise Fault(FaultCategory.PROCESS, "worker failed to start",
                            details={"generation": number, "reason": type(gen.start_error).__name__})
            self.generation = number
            self._current = gen
            if number > 1:
                self.telemetry.restart(number, "worker replaced")
            else:
                self.telemetry.worker_started(number)
            return gen

    async def _retire(self, gen: _Generation) -> None:
        self._generations = [g for g in self._generations if not g.ended.is_set() or g is gen]
        gen.stop.set()
        gen.pipes.kill()
        with anyio.CancelScope(shield=True), anyio.move_on_after(3):
            await gen.ended.wait()

    def kill(self, generation: int | None = None) -> None:
        """Kill the current worker (only if it is still `generation`); the next call starts a new one."""
        gen = self._current
        if gen is not None and (generation is None or gen.number == generation):
            gen.dead = True
            gen.pipes.kill()
            gen.stop.set()

    @property
    def worker_pid(self) -> int | None:
        gen = self._current
        return gen.pipes.pid if gen is not None else None

    # calls ---------------------------------------------------------------
    async def call(self, tool: str, arguments: dict[str, Any], *, job_id: str | None = None,
                   progress: ProgressCb | None = None, timeout_s: float | None = None) -> tuple[dict[str, Any], int]:
        """Run a tool on the worker; returns (structured result, generation). Raises Fault or WorkerError."""
        gen = await self._ensure()
        assert gen.client is not None
        meta: dict[str, Any] = {"dome/job_id": job_id} if job_id else {}
        direct = self.direct and job_id is None and tool in DIRECT_TOOLS
        gen.inflight += 1
        try:
            with anyio.fail_after(timeout_s or self.call_timeout_s):
                if direct:  # a short read: one line each way, no MCP layers (transport.WorkerPipes)
                    ok, obj = await gen.pipes.direct_call(tool, arguments)
                else:
                    result = await gen.client.call_tool(tool, arguments, progress_callback=progress,
                                                        meta=meta or None)  # type: ignore[arg-type]
        except TimeoutError:
            raise Fault(FaultCategory.TIMEOUT, f"{tool} did not finish in {timeout_s or self.call_timeout_s:.0f}s",
                        details={"generation": gen.number, "tool": tool}) from None
        except MCPError as exc:
            raise await self._classify(gen, tool, f"worker call failed ({exc.error.code})") from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError) as exc:
            raise await self._classify(gen, tool, f"worker pipe failed ({type(exc).__name__})") from None
        finally:
            gen.inflight -= 1
            if gen.inflight == 0:
                gen.idle.set()
        if direct:
            if not ok:
                ErrorObject.from_dict(obj)  # shape check
                raise WorkerError(dict(obj))
            return dict(obj), gen.number
        if result.is_error:
            obj = result.structured_content or {"code": "ENGINE_ERROR", "message": "worker error", "details": {},
                                                "hints": [], "retry": "none"}
            ErrorObject.from_dict(obj)  # shape check
            raise WorkerError(dict(obj))
        if result.structured_content is None:
            raise Fault(FaultCategory.DOWNSTREAM_RESPONSE, f"{tool} returned no structured result",
                        details={"generation": gen.number, "tool": tool})
        return dict(result.structured_content), gen.number

    async def _classify(self, gen: _Generation, tool: str, message: str) -> Fault:
        if getattr(gen, "rollout_killed", False):
            return Fault(FaultCategory.ROLLOUT_DISRUPTION, f"{tool} was cut off by a worker rollout",
                         details={"generation": gen.number, "tool": tool})
        gen.dead = True
        p = gen.pipes.process
        if p is not None and p.returncode is None:
            with anyio.move_on_after(0.5):
                await p.wait()
        if p is not None and p.returncode is not None:
            return Fault(FaultCategory.PROCESS, f"worker exited (code {p.returncode}) during {tool}",
                         details={"generation": gen.number, "tool": tool, "exit_code": p.returncode})
        return Fault(FaultCategory.TRANSPORT, message, details={"generation": gen.number, "tool": tool})

    async def confirm_stopped(self, job_id: str, generation: int, within_s: float) -> bool:
        """After a cancel: wait (bounded) until the job's thread has stopped; kill the worker if it does not."""
        gen = self._current
        if gen is None or gen.number != generation or not gen.alive or gen.client is None:
            return True
        stopped = False
        with anyio.move_on_after(within_s):
            try:
                res = await gen.client.call_tool("dome_job_state", {"job_id": job_id, "wait_s": max(within_s - 0.1, 0.0)})
                stopped = (res.structured_content or {}).get("state") in ("stopped", "unknown")
            except Exception:
                stopped = False
        if not stopped:
            self.telemetry.fault(Fault(FaultCategory.TIMEOUT, "cancellation not honoured in time; worker killed",
                                       details={"job_id": job_id}), tool=None, restarted=True)
            gen.pipes.kill()
        return stopped

    async def probe(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        res, _ = await self.call("dome_probe", {"tool": tool, "arguments": arguments}, timeout_s=30)
        return res


class _Streams:
    """Adapt an async context manager of streams to the SDK's Transport protocol."""

    def __init__(self, cm: Any) -> None:
        self._streams = cm

    async def __aenter__(self) -> Any:
        return self._streams

    async def __aexit__(self, *exc: Any) -> None:
        return None
