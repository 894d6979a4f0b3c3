"""Tool dispatch: the SDK-independent core of the MCP host.

`ToolHost.call(name, arguments)` does, in order: resolve the tool name
(aliases), normalize unambiguous slips, validate against the closed schema,
check consent for destructive tools, run the tool (a host handler, or a
worker call under a job with progress, cancellation, restart and replay per
the tool's contract), stamp schema_version + provenance, bound the result
and render the text. Every outcome is recorded in telemetry.

The MCP server (server.py) and the run loop's worker gateway both sit on
this class; `allowed` (the tool names a grant permits) filters tools/list
and calls alike.
"""
from __future__ import annotations

import os
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Collection, Mapping, NoReturn

import anyio
import anyio.abc

from registry.errors import DomeError
from registry.pathpolicy import OVERWRITE_FIELD, TOOL_PATHS
from registry.pathpolicy import apply as apply_paths
from registry.pathpolicy import outputs as path_outputs
from registry.provenance import stamp, standard_block

from . import artifacts, conformance, render
from . import paths as host_paths
from .catalog import Replay, ToolSpec, default_specs, specs_from_flat_contract
from .consent import ConsentBook
from .context import CallContext, Handler, Progress
from .identity import LOCAL, ArtifactOwners, Client, scope_allows
from ..toolcore import InputSchema, error_object
from .faults import Fault, FaultCategory, SessionNotFound, UnknownTool
from .jobs import Job, JobStore
from .normalization import ToolNames, normalize_arguments
from .orchestration import HANDLERS as ORCH
from .orchestration import run_state
from .refpolicy import RefPolicy
from .supervisor import WorkerError, WorkerSupervisor
from .telemetry import Telemetry

MAX_REPLAYS = 2
MAX_SESSION_JOURNAL = 2000  # query_region calls kept per session to rebuild its shape ids after a restart
MAX_GONE_SESSIONS = 10_000
CANCEL_CONFIRM_S = 1.0
HOST_VERSIONS = {"dome-mcp-host": "1.0.0"}



@dataclass
class CallResult:
    structured: dict[str, Any]
    is_error: bool
    text: str
    meta: dict[str, Any]
    content: list[dict[str, Any]] = field(default_factory=list)  # images and resource links after the text


@dataclass
class _SessionPin:
    """What the host needs to restore a worker-held session in a new worker."""

    opener: str
    args: dict[str, Any]
    sha256: str | None
    generation: int
    worker_id: str
    last_end: float  # monotonic end of the last call on the session
    owner: str | None = None  # the client that opened it; no other client may use it
    queries: list[dict[str, Any]] | None = field(default_factory=list)  # None: too many to replay


class ToolHost:
    def __init__(self, *, ops_root: Path | str = "ops", specs: Mapping[str, ToolSpec] | None = None,
                 consent_mode: str | None = None, telemetry_path: Path | None = None,
                 worker_env: dict[str, str] | None = None, handlers: Mapping[str, Handler] | None = None,
                 db_url: str | None = None, rollout_signal: bool = False,
                 allow: Collection[str] | None = None, ref_policy: RefPolicy | None = None) -> None:
        self.rollout_signal = rollout_signal  # SIGHUP -> hot worker reinstall (rollout)
        self.ops_root = Path(ops_root).absolute()
        self.db_url = db_url
        self.specs: dict[str, ToolSpec] = dict(specs if specs is not None else default_specs())
        if conformance.enabled():  # the MCP conformance suite's fixture, never without the switch
            self.specs.update(specs_from_flat_contract(conformance.CONTRACT))
        self.names = ToolNames(self.specs)
        self._compiled: dict[str, InputSchema] = {}
        state = self.ops_root / "mcp"
        self.state_dir = state
        self.telemetry = Telemetry(path=telemetry_path if telemetry_path is not None else state / "telemetry.jsonl")
        self.jobs = JobStore(state / "jobs")
        self.consent = ConsentBook(state, consent_mode or os.environ.get("CONSENT_MODE", "strict"))
        # the one path policy (coordinator/mcp/paths.py); a root holding the host's secrets keeps it from
        # serving (checked when it starts to serve: minting a consent token serves nothing)
        env = _worker_env(self.ops_root, worker_env)
        self.paths = host_paths.host_policy(self.ops_root, {**os.environ, **env})
        self.supervisor = WorkerSupervisor(self.telemetry, env={**env, **self.paths.env()}, policy=self.paths)
        self.sessions: dict[str, _SessionPin] = {}
        self.gone_sessions: dict[str, dict[str, Any]] = {}  # expired or lost: never restored again
        self.idempotent: dict[tuple[str, ...], dict[str, Any]] = {}  # (tool, client, key) -> first result
        self.ref_policy = ref_policy or RefPolicy.from_env()  # which refs an agent's run may move alone
        self.artifact_owners = ArtifactOwners(state)  # resource URI -> the client whose call wrote it (on disk)
        self._scope_tools: dict[str | None, frozenset[str]] = {}
        self.handlers: dict[str, Handler] = {"health": _health, "telemetry": _telemetry, "poll": _poll,
                                             "cancel": _cancel}
        self.handlers.update(ORCH)
        if conformance.enabled():
            self.handlers.update(conformance.HANDLERS)
        self.handlers.update(handlers or {})
        self._tg: anyio.abc.TaskGroup | None = None
        self._users = 0
        self._lifespan_lock = anyio.Lock()
        self._descriptors = {n: s.descriptor() for n, s in self.specs.items()}
        self.allowed = self.resolve_allow(allow) if allow else None  # None: every tool

    def resolve_allow(self, allow: Collection[str]) -> frozenset[str]:
        """An allow-list of tool names (aliases too) and capability classes (read | write | execute | admin)."""
        out: set[str] = set()
        for item in allow:
            item = item.strip()
            if item in ("read", "write", "execute", "admin"):
                out |= {n for n, sp in self.specs.items() if sp.capability == item}
            elif item:
                name = self.names.resolve(item)
                if name is None:
                    raise ValueError(f"--allow: no tool or capability class {item!r}")
                out.add(name)
        return frozenset(out)

    # lifecycle -----------------------------------------------------------
    @asynccontextmanager
    async def running(self) -> AsyncIterator["ToolHost"]:
        """Enter once per serving context (re-entrant: nested entries share one supervisor)."""
        host_paths.check_secrets(self.paths, self.ops_root)
        async with self._lifespan_lock:
            self._users += 1
            first = self._users == 1
        if not first:
            try:
                yield self
            finally:
                self._users -= 1
            return
        try:
            async with self.supervisor, anyio.create_task_group() as tg:
                self._tg = tg
                if self.rollout_signal:
                    tg.start_soon(self._rollout_on_sighup)
                self.telemetry.lifecycle_to("ready")
                try:
                    yield self
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._shutdown()
                    tg.cancel_scope.cancel()
        finally:
            self._tg = None
            self._users -= 1
            self.telemetry.lifecycle_to("stopped")
            self.telemetry.close()

    async def _rollout_on_sighup(self) -> None:
        import signal

        with anyio.open_signal_receiver(signal.SIGHUP) as signals:
            async for _ in signals:
                await self.rollout()

    async def rollout(self) -> dict[str, Any]:
        """Hot reinstall of the worker (new code, new engines): drain the old generation, serve from a new one."""
        return await self.supervisor.rollout()

    async def _shutdown(self) -> None:
        self.telemetry.lifecycle_to("stopping")
        for job in self.jobs.running():
            self.jobs.request_cancel(job, "host shutting down")
        with anyio.move_on_after(CANCEL_CONFIRM_S + 0.5):
            for job in self.jobs.running():
                await job.done.wait()
        for job in self.jobs.running():  # not confirmed: the worker is killed on exit
            self.jobs.finish(job, "cancelled", error={"code": "CANCELLED", "message": "host shut down",
                                                      "details": {}, "hints": [], "retry": "light"})

    # discovery -----------------------------------------------------------
    def list_tools(self, allowed: Collection[str] | None = None) -> list[dict[str, Any]]:
        allowed = self._effective(allowed)
        return [d for n, d in self._descriptors.items() if allowed is None or n in allowed]

    def _effective(self, allowed: Collection[str] | None) -> Collection[str] | None:
        if self.allowed is None:
            return allowed
        return self.allowed if allowed is None else self.allowed & frozenset(allowed)

    def compiled(self, name: str) -> InputSchema:
        """The tool's input schema, compiled once (the dispatch core shared with the worker gateway)."""
        c = self._compiled.get(name)
        if c is None:
            spec = self.specs[name]
            c = self._compiled[name] = InputSchema(spec.name, spec.input_schema, spec.contract_id)
        return c

    def for_client(self, client: Client | None, allowed: Collection[str] | None = None) -> Collection[str] | None:
        """The tools a client's scope permits, within `allowed` (None: no limit)."""
        if client is None or client.operator:
            return allowed
        mine = self._scope_tools.get(client.scope)
        if mine is None:  # a few scopes: each one's tool set is computed once
            mine = self._scope_tools[client.scope] = frozenset(
                n for n, sp in self.specs.items() if scope_allows(client.scope, n, sp.capability))
        return mine if allowed is None else mine & frozenset(allowed)

    def artifact_filter(self, client: Client) -> Callable[[str], bool]:
        """Which resource URIs a client may list and read: those its calls wrote (the operator: all)."""
        if client.operator:
            return lambda uri: True
        return lambda uri: self.artifact_owners.owner(uri) == client.name

    def resolve_tool(self, name: str, allowed: Collection[str] | None = None) -> str | None:
        """The canonical name of a tool this caller may use, or None."""
        allowed = self._effective(allowed)
        resolved = self.names.resolve(name)
        return None if resolved is None or (allowed is not None and resolved not in allowed) else resolved

    def prepare(self, name: str, arguments: Mapping[str, Any] | None,
                allowed: Collection[str] | None = None) -> tuple[ToolSpec, dict[str, Any], list[str]]:
        """Resolve, normalize and validate: (spec, arguments, normalization notes). Raises typed errors."""
        notes: list[str] = []
        resolved = self.resolve_tool(name, allowed)
        if resolved is None:
            raise UnknownTool(f"no tool named {name!r}", details={"tool": name},
                              hints=["call tools/list for the tools you may use"])
        if resolved != name:
            notes.append(f"tool {name} -> {resolved}")
        spec = self.specs[resolved]
        args, arg_notes = normalize_arguments(spec, arguments or {})
        notes += arg_notes
        self.compiled(resolved).validate(args)
        return spec, args, notes

    # calls ---------------------------------------------------------------
    async def call(self, name: str, arguments: Mapping[str, Any] | None, *, progress: Progress | None = None,
                   allowed: Collection[str] | None = None, client: Client | None = None) -> CallResult:
        t0 = time.perf_counter()
        client = client or LOCAL
        allowed = self.for_client(client, allowed)
        tool = name
        notes: list[str] = []
        render_mode = "porcelain"
        retries = [0]
        try:
            spec, args, notes = self.prepare(name, arguments, allowed)
            tool = spec.name
            render_mode = args.pop("render", "porcelain")
            wait = args.pop("wait", True)
            if spec.name in TOOL_PATHS:  # every path checked before any work (the worker checks again)
                args = self.checked_paths(spec.name, args, client.name)
            ctx = CallContext(self, spec, progress, notes, client=client)
            if spec.served_by == "host":
                result = await self.handlers[spec.name](args, ctx)
            else:
                self._check_session_owner(args, client)
                result = await self._worker_tool(spec, args, wait, ctx, retries)
            # A result with its own schema_version + provenance (the litho engine's) passes through
            # byte for byte (RFC 0006 G3); the host's standard provenance always rides in _meta.
            structured = stamp(result, args, tool=spec.name, engine_versions=HOST_VERSIONS)
            meta: dict[str, Any] = {"dome/provenance": _standard_provenance(spec.name, structured, args)}
            if ctx.job_id is not None:
                meta["dome/job_id"] = ctx.job_id
            if notes:
                meta["dome/normalized"] = notes
            whole = render.as_json_text(structured)
            structured = render.bound_structured(structured, self.state_dir / "artifacts", text=whole)
            text = render.json_text(spec.contract_id, structured) if render_mode == "json" else \
                render.porcelain(spec.name, structured, notes=notes)
            # an artifact reference is an object with a media_type: most results have none to walk for
            extra = ctx.content + (artifacts.content_for(self.ops_root, structured)
                                   if '"media_type"' in whole else [])
            if spec.name in TOOL_PATHS:  # files written where the call said: links a remote client can read
                extra += artifacts.content_for(self.ops_root, {"outputs": [
                    {"path": str(p), "media_type": artifacts.media_type(p), "kind": "output"}
                    for p in path_outputs(spec.name, args)]})
            for item in extra:
                if item.get("type") == "resource_link":
                    self.artifact_owners.claim(item["uri"], client.name)
            self.telemetry.call(tool, ok=True, ms=(time.perf_counter() - t0) * 1e3, retries=retries[0],
                                client=client.name)
            self.telemetry.success()
            return CallResult(structured, False, text, meta, extra)
        except anyio.get_cancelled_exc_class():
            self.telemetry.call(tool, ok=False, ms=(time.perf_counter() - t0) * 1e3,
                                error={"code": "CANCELLED", "category": None, "message": "cancelled"},
                                client=client.name)
            raise
        except Exception as exc:  # typed errors become isError results; anything else is an invariant breach
            obj = exc.obj if isinstance(exc, WorkerError) else error_object(exc)
            self.telemetry.call(tool, ok=False, ms=(time.perf_counter() - t0) * 1e3, error=obj,
                                retries=retries[0], client=client.name)
            text = render.as_json_text(obj) if render_mode == "json" else render.porcelain_error(obj, notes=notes)
            return CallResult(obj, True, text, {"dome/normalized": notes} if notes else {})

    def checked_paths(self, tool: str, args: dict[str, Any], client: str | None) -> dict[str, Any]:
        """The arguments with each path resolved under its roots (relative outputs in the client's folder)."""
        overwrite = bool(args.get(OVERWRITE_FIELD))
        out, _ = apply_paths(self.paths, tool, args, base=host_paths.artifact_base(self.paths, client))
        return {**out, OVERWRITE_FIELD: True} if overwrite else out

    # worker tools --------------------------------------------------------
    async def _worker_tool(self, spec: ToolSpec, args: dict[str, Any], wait: bool, ctx: CallContext,
                           retries: list[int]) -> dict[str, Any]:
        if not spec.long_running:
            result, _ = await self._execute(spec, args, None, ctx.progress, retries)
            pin = self.sessions.get(result.get("session_id")) if isinstance(result.get("session_id"), str) else None
            if pin is not None and pin.owner is None:  # a session just opened belongs to its opener
                pin.owner = ctx.client.name if ctx.client else None
            return result
        job = self.jobs.new(spec.name, owner=ctx.client.name if ctx.client else None)
        if not wait:
            if self._tg is None:
                raise Fault(FaultCategory.INVARIANT_BREACH, "host is not running")
            started = anyio.Event()
            self._tg.start_soon(self._background, spec, args, job, started)
            await started.wait()
            return {"job_id": job.job_id, "status": job.status, "tool": spec.name}
        ctx.job_id = job.job_id  # rides in _meta: the engine's result stays byte-identical (RFC G3)
        result, _ = await self._execute(spec, args, job, ctx.progress, retries)
        return result

    async def _background(self, spec: ToolSpec, args: dict[str, Any], job: Job, started: anyio.Event) -> None:
        with anyio.CancelScope() as scope:
            job.cancel_hook = lambda reason: scope.cancel()
            self.jobs.start(job)
            started.set()
            try:
                await self._execute(spec, args, job, None, [0])
            except Exception:
                pass  # recorded on the job by _execute
        if scope.cancelled_caught and job.status not in ("succeeded", "failed", "cancelled"):
            self.jobs.finish(job, "cancelled", error={"code": "CANCELLED", "message": job.cancel_requested or "cancelled",
                                                      "details": {}, "hints": [], "retry": "none"})

    async def _execute(self, spec: ToolSpec, args: dict[str, Any], job: Job | None, upstream: Progress | None,
                       retries: list[int]) -> tuple[dict[str, Any], int]:
        """Run on the worker with restart + replay per contract; job bookkeeping and cancellation."""
        attempt = 0
        generation = 0

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            frac = value / total if total else value
            if job is not None and not self.jobs.progress(job, frac, message):
                return  # not strictly increasing: dropped
            if upstream is not None:
                await upstream(frac, 1.0, message)

        if job is not None and job.status == "queued":
            self.jobs.start(job)
        try:
            while True:
                attempt += 1
                try:
                    call_args, public_sid = await self._pin_session(spec, args)
                    generation = self.supervisor.generation
                    if job is not None:
                        job.generation = generation
                    try:
                        result, generation = await self.supervisor.call(
                            spec.name, call_args, job_id=job.job_id if job else None, progress=on_progress)
                    except WorkerError as exc:
                        self._after_session_call(spec, args, None, public_sid, generation, exc.obj)
                        raise
                    result = self._after_session_call(spec, args, result, public_sid, generation)
                    if attempt > 1:
                        result = {**result}
                    if job is not None:
                        self.jobs.finish(job, "succeeded", result=result)
                    return result, generation
                except Fault as fault:
                    self.telemetry.fault(fault, tool=spec.name, restarted=fault.restart)
                    if fault.restart:
                        self.supervisor.kill(fault.details.get("generation"))
                    if not fault.restart:
                        raise
                    if spec.replay is Replay.NEVER_REPLAY:
                        raise Fault(fault.category, f"{spec.name} was interrupted ({fault.message}); "
                                    "its contract is NeverReplay, so it was not run again",
                                    details={**fault.details, "replay": "NeverReplay", "replayed": False},
                                    hints=["check whether it took effect (run_status / events) before calling again"],
                                    retry="none") from None
                    if attempt > MAX_REPLAYS:
                        raise Fault(FaultCategory.REPLAY_EXHAUSTION,
                                    f"{spec.name} failed {attempt} times ({fault.category.value}); giving up",
                                    details={**fault.details, "attempts": attempt, "replay": spec.replay.value}) from None
                    if spec.replay is Replay.PROBE_REQUIRED and spec.side_effect == "none":
                        pass  # no effect to probe for: the probe is the state rebuild (_pin_session) before the replay
                    elif spec.replay is Replay.PROBE_REQUIRED:
                        probe = await self.supervisor.probe(spec.name, args)
                        effect = probe.get("effect")
                        if effect == "present" and isinstance(probe.get("result"), dict):
                            retries[0] += 1
                            result = dict(probe["result"])
                            if job is not None:
                                self.jobs.finish(job, "succeeded", result=result)
                            return result, self.supervisor.generation
                        if effect != "absent":
                            raise Fault(FaultCategory.REPLAY_EXHAUSTION,
                                        f"{spec.name} was interrupted and the probe could not prove it had no effect",
                                        details={**fault.details, "replay": "ProbeRequired", "probe": effect},
                                        retry="none") from None
                    retries[0] += 1
                    continue
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                if job is not None:
                    await self.supervisor.confirm_stopped(job.job_id, generation or self.supervisor.generation,
                                                          CANCEL_CONFIRM_S)
                    self.jobs.finish(job, "cancelled", error={"code": "CANCELLED",
                                                              "message": job.cancel_requested or "cancelled by the client",
                                                              "details": {}, "hints": [], "retry": "none"})
            raise
        except WorkerError as exc:
            if job is not None:
                status = "cancelled" if exc.obj.get("code") == "CANCELLED" else "failed"
                self.jobs.finish(job, status, error=exc.obj)
            raise
        except DomeError as exc:
            if job is not None:
                self.jobs.finish(job, "failed", error=exc.to_object())
            raise

    # worker-held sessions ------------------------------------------------
    def _check_session_owner(self, args: dict[str, Any], client: Client) -> None:
        """Another client's session is answered as if it did not exist (its id tells nothing)."""
        sid = args.get("session_id")
        pin = self.sessions.get(sid) if isinstance(sid, str) else None
        if pin is not None and not client.owns(pin.owner):
            raise SessionNotFound(f"no session {sid}", details={"session_id": sid},
                                  hints=["open_layout again"])

    async def _pin_session(self, spec: ToolSpec, args: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """Map a public session id to the worker's, restoring the session in a new worker first.

        A session comes back whole (same id, same artifact folder, shape ids, DRC runs, view) or
        the call fails with SESSION_NOT_FOUND / SESSION_EXPIRED and the id is gone for good:
        never a half-alive session.
        """
        sid = args.get("session_id")
        if not isinstance(sid, str):
            return args, None
        gone = self.gone_sessions.get(sid)
        if gone is not None:
            raise DomeError(gone["message"], code=gone["code"], details={"session_id": sid}, hints=gone["hints"])
        pin = self.sessions.get(sid)
        if pin is None:
            return args, None
        current = await self.supervisor.ensure()
        if pin.generation != current:
            await self._restore(sid, pin)
        return {**args, "session_id": pin.worker_id}, sid

    async def _restore(self, sid: str, pin: _SessionPin) -> None:
        idle_s = time.monotonic() - pin.last_end
        if pin.opener == "open_layout":
            if pin.queries is None:
                self._forget_session(sid, "SESSION_NOT_FOUND", "the session was lost with its worker and had "
                                     "too many queries to rebuild its shape ids", ["open_layout again"])
            request = {"session_id": pin.worker_id, "open": pin.args, "sha256": pin.sha256, "idle_s": idle_s,
                       "queries": pin.queries}
            try:
                _, gen = await self.supervisor.call("dome_session_restore", request, timeout_s=300)
            except WorkerError as exc:
                code = exc.obj.get("code")
                if code == "SESSION_EXPIRED":
                    self._forget_session(sid, code, "session expired after inactivity", ["open_layout again"])
                self._forget_session(sid, "SESSION_NOT_FOUND", "the session was lost with its worker and could "
                                     f"not be restored ({code})", ["open_layout again"])
            pin.generation = gen
            return
        # a generic opener (no restore tool): reopen from the pinned request, map the new id
        try:
            rebuilt, gen = await self.supervisor.call(pin.opener, pin.args)
        except WorkerError as exc:
            self._forget_session(sid, "SESSION_NOT_FOUND", "the session was lost with its worker and could not "
                                 f"be rebuilt ({exc.obj.get('code')})", ["open the layout again"])
        sha = (rebuilt.get("source") or {}).get("sha256")
        if pin.sha256 is not None and sha != pin.sha256:
            self._forget_session(sid, "SESSION_NOT_FOUND", "the session was lost with its worker and its input "
                                 "changed since", ["open the layout again"])
        pin.worker_id = str(rebuilt["session_id"])
        pin.generation = gen

    def _forget_session(self, sid: str, code: str, message: str, hints: list[str]) -> NoReturn:
        """The session is gone for good: every later call on it gets the same typed answer."""
        self.sessions.pop(sid, None)
        self.gone_sessions[sid] = {"code": code, "message": message, "hints": hints}
        while len(self.gone_sessions) > MAX_GONE_SESSIONS:
            self.gone_sessions.pop(next(iter(self.gone_sessions)))
        raise DomeError(message, code=code, details={"session_id": sid}, hints=hints)

    def _after_session_call(self, spec: ToolSpec, args: dict[str, Any], result: dict[str, Any] | None,
                            public_sid: str | None, generation: int, error: dict[str, Any] | None = None) -> Any:
        """Journal what a restore needs; an expired or missing session loses its pin."""
        if public_sid is not None:
            pin = self.sessions.get(public_sid)
            if pin is None:
                return result
            pin.last_end = time.monotonic()  # idle time counts from the end of the last call
            code = (error or {}).get("code")
            if code in ("SESSION_EXPIRED", "SESSION_NOT_FOUND"):
                self.sessions.pop(public_sid, None)
                self.gone_sessions[public_sid] = {"code": code, "message": str(error.get("message")),
                                                  "hints": list(error.get("hints") or [])}
                return result
            if result is None:
                return result
            if spec.name == "query_region" and pin.queries is not None:
                if len(pin.queries) >= MAX_SESSION_JOURNAL:
                    pin.queries = None  # too long to replay: the session is not restorable any more
                else:
                    pin.queries.append({k: v for k, v in args.items() if k != "session_id"})
            if result.get("session_id") == pin.worker_id:
                result = {**result, "session_id": public_sid}
                prov = result.get("provenance")
                if isinstance(prov, dict) and "outputs_hash" in prov:  # the hashes cover the public id
                    result["provenance"] = {**prov, **standard_block(
                        result, args, tool=spec.name, engine_versions=prov.get("engine_versions"))}
            if spec.name == "close_session":
                self.sessions.pop(public_sid, None)
            return result
        if result is None:
            return result
        opener = "session_id" not in spec.request.get("properties", {})
        if opener and isinstance(result.get("session_id"), str):
            sha = (result.get("source") or {}).get("sha256")
            self.sessions[result["session_id"]] = _SessionPin(spec.name, dict(args), sha, generation,
                                                              result["session_id"], time.monotonic())
        return result


def _standard_provenance(tool: str, structured: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """registry.provenance's block for _meta; reused (not re-hashed) when the result already carries it."""
    prov = structured.get("provenance")
    if isinstance(prov, dict) and prov.get("tool") == tool and "outputs_hash" in prov:
        return {**prov, "engine_versions": dict(sorted({**prov.get("engine_versions", {}), **HOST_VERSIONS}.items()))}
    body = {k: v for k, v in structured.items() if k != "provenance"}
    return stamp(body, args, tool=tool, engine_versions=HOST_VERSIONS)["provenance"]


def _worker_env(ops_root: Path, extra: Mapping[str, str] | None) -> dict[str, str]:
    """KLayout artifacts live under the ops root unless the caller chose a folder."""
    env = dict(extra or {})
    if "KLAYOUT_MCP_ARTIFACT_ROOT" not in env and not os.environ.get("KLAYOUT_MCP_ARTIFACT_ROOT"):
        env["KLAYOUT_MCP_ARTIFACT_ROOT"] = str(ops_root / "mcp" / "klayout")
    return env


# host tools ----------------------------------------------------------------
async def _health(args: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
    h = ctx.host.telemetry.health()
    h["worker_pid"] = ctx.host.supervisor.worker_pid
    h["running_jobs"] = len(ctx.host.jobs.running())
    return h


async def _telemetry(args: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
    return ctx.host.telemetry.snapshot()


async def _poll(args: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
    job = ctx.host.jobs.get(args["job_id"], ctx.client)
    out = job.to_json()
    if job.run_id is not None and job.status in ("succeeded", "failed", "cancelled"):
        # the job ended when `dome run` did; the run may have moved on since (promoted at the gate)
        state = await run_state(ctx, job.run_id)
        if state is not None:
            out["run"] = state
    return out


async def _cancel(args: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
    job = ctx.host.jobs.get(args["job_id"], ctx.client)
    if job.status in ("succeeded", "failed", "cancelled"):
        return {**job.to_json(), "cancelled": False}
    ctx.host.jobs.request_cancel(job, args.get("reason") or "cancelled by the client")
    with anyio.move_on_after(CANCEL_CONFIRM_S + 1.0):
        await job.done.wait()
    return {**job.to_json(), "cancelled": job.status == "cancelled"}
