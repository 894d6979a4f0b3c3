"""Orchestration tools: runs through the `dome` CLI, as supervised subprocesses.

run_submit starts `dome run WORK_QUEUE --json` as a job (its own process
group, killed on cancel) and returns as soon as the run has said its run_id.
run_status, events, evidence, verify and promote call the matching `dome`
commands with `--json`; their JSON output is the tool result, unmodified
(the run loop and integration own those contracts). A command missing from
this build is a typed DOWNSTREAM_UNAVAILABLE error, not a crash.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from registry.errors import DomeError

from . import paths as host_paths
from .faults import ConsentRequired, Fault, FaultCategory

if TYPE_CHECKING:
    from .context import CallContext

REPO_ROOT = Path(__file__).resolve().parents[2]
RUN_ID_WAIT_S = 20.0
EXIT_OUTCOME = {0: "completed", 1: "invalid", 2: "bad_input", 3: "internal_error", 4: "blocked", 5: "failed",
                6: "cancelled"}


def _argv(ctx: "CallContext", *args: str) -> list[str]:
    argv = [sys.executable, "-m", "coordinator.cli.main", *args, "--ops-root", str(ctx.host.ops_root), "--json"]
    if ctx.host.db_url:
        argv += ["--db", ctx.host.db_url]
    return argv


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _parse_json_output(stdout: str) -> dict[str, Any] | None:
    text = stdout.strip()
    if not text:
        return None
    try:
        value = json.loads(text)
        return value if isinstance(value, dict) else {"items": value}
    except json.JSONDecodeError:
        pass
    last = None
    for line in text.splitlines():  # JSON lines: the last object is the summary
        with suppress(json.JSONDecodeError):
            obj = json.loads(line)
            if isinstance(obj, dict):
                last = obj
    return last


async def _dome(ctx: "CallContext", *args: str, timeout_s: float = 120.0) -> dict[str, Any]:
    argv = _argv(ctx, *args)
    with anyio.fail_after(timeout_s):
        proc = await anyio.run_process(argv, check=False, env=_env(), stdin=subprocess.DEVNULL)
    out = proc.stdout.decode(errors="replace")
    err = proc.stderr.decode(errors="replace")
    if proc.returncode == 2 and "not available in this build" in err:
        raise DomeError(f"`dome {args[0]}` is not available in this build", code="DOWNSTREAM_UNAVAILABLE",
                        details={"command": args[0]}, hints=["this dome build lacks that subsystem"], retry="none")
    parsed = _parse_json_output(out)
    if parsed is not None and isinstance(parsed.get("code"), str) and isinstance(parsed.get("message"), str) \
            and proc.returncode not in (0, 1):
        raise DomeError(parsed["message"], code=parsed["code"], details=parsed.get("details") or {},
                        hints=parsed.get("hints") or [], retry=parsed.get("retry", "none"))
    if parsed is None:
        raise Fault(FaultCategory.DOWNSTREAM_RESPONSE, f"`dome {args[0]}` gave no JSON (exit {proc.returncode})",
                    details={"command": args[0], "exit_code": proc.returncode})
    return {**parsed, "exit_code": proc.returncode} if "exit_code" not in parsed else parsed


async def run_status(args: dict[str, Any], ctx: "CallContext") -> dict[str, Any]:
    return await _dome(ctx, "status", args["run_id"])


async def events(args: dict[str, Any], ctx: "CallContext") -> dict[str, Any]:
    """A bounded page of a run's ledger events (sequence > since), read from the ledger itself."""
    run_id = args["run_id"]
    since = int(args.get("since", 0))
    limit = int(args.get("limit", 100))

    def read() -> list[dict[str, Any]]:
        from ledger import Ledger

        # a run's events: read the ledger as it is (LEDGER_NOT_FOUND when there is none; never create one)
        led = Ledger.open(ctx.host.db_url, ctx.host.ops_root, migrate_schema=False, must_exist=True)
        try:
            return [{**r.envelope(), "record_digest": r.record_digest}
                    for r in led.events(run_id, since=since, limit=limit + 1)]
        finally:
            led.close()

    try:
        items = await anyio.to_thread.run_sync(read)
    except DomeError:
        raise
    except Exception as exc:  # noqa: BLE001 - the ledger is downstream of the host
        raise Fault(FaultCategory.DOWNSTREAM_RESPONSE, f"ledger read failed ({type(exc).__name__})",
                    details={"run_id": run_id}) from None
    page = items[:limit]
    return {"run_id": run_id, "since": since, "events": page, "count": len(page),
            "next_since": page[-1]["sequence"] if page else since, "more": len(items) > limit}


async def evidence(args: dict[str, Any], ctx: "CallContext") -> dict[str, Any]:
    run_dir = ctx.host.ops_root / "runs" / args["run_id"]
    out: dict[str, Any] = {"run_id": args["run_id"], "artifacts": []}
    if run_dir.is_dir():
        from registry.canonical import digest_bytes
        for p in sorted(run_dir.rglob("*.json")):
            rel = p.relative_to(run_dir).as_posix()
            if rel.startswith("events/"):
                continue
            out["artifacts"].append({"path": str(p), "name": rel, "digest": digest_bytes(p.read_bytes())})
    ver = await _dome(ctx, "verify", args["run_id"])
    out["verify"] = ver
    return out


async def verify(args: dict[str, Any], ctx: "CallContext") -> dict[str, Any]:
    return await _dome(ctx, "verify", args["run_id"])


def _gate_token_file(ctx: "CallContext", run_id: str) -> Path:
    return ctx.host.ops_root / "runs" / run_id / "gate" / "consent.token"


async def promote(args: dict[str, Any], ctx: "CallContext") -> dict[str, Any]:
    """Promote a run held at the human gate.

    The run's own single-use consent token (written by `dome run` to
    ops/runs/RUN/gate/consent.token for a person to read, verified and spent
    by the integration layer) is what moves the ref. CONSENT_MODE decides who
    may supply it: strict -- only the caller, i.e. the user gave it to the
    agent; lenient -- the caller may instead echo back a single-use host
    confirmation token (dct1.*) returned by a first call, and the host reads
    the gate token itself; off -- the host reads it without asking (logged).
    """
    host = ctx.host
    run_id = args["run_id"]
    key = ("promote", _client_name(ctx), args["idempotency_key"])
    if key in host.idempotent:
        return {**host.idempotent[key], "deduplicated": True}
    state = None if args.get("consent_token") else await run_state(ctx, run_id)
    if state is not None and state.get("outcome") == "promoted":  # nothing to consent to: say so
        result = {"run_id": run_id, "status": "promoted", "already_promoted": True,
                  "promoted_ref": state.get("promoted_ref"), "head": state.get("head"),
                  "message": f"run {run_id} is already promoted; nothing was done"}
        host.idempotent[key] = result
        return result
    token = args.get("consent_token")
    mode = host.consent.mode
    gate_file = _gate_token_file(ctx, run_id)
    if mode == "strict" or (token and not token.startswith("dct1.")):
        if not token:
            raise ConsentRequired("promote is destructive and needs the run's consent token",
                                  details={"run_id": run_id, "mode": mode},
                                  hints=["ask the user for the consent token of this run "
                                         "(a person reads it from ops/runs/RUN/gate/consent.token)",
                                         "then call promote again with consent_token"])
        gate_token = token
    else:
        if mode == "lenient":
            host.consent.check_and_spend("promote", run_id, token)  # raises CONSENT_REQUIRED with a token to echo
        if not gate_file.is_file():
            raise DomeError(f"run {run_id} is not waiting for consent", code="CONSENT_NOT_REQUESTED",
                            details={"run_id": run_id}, hints=["run_status shows why the run is blocked"])
        gate_token = gate_file.read_text().strip()
    host.telemetry._emit({"event": "consent", "tool": "promote", "run_id": run_id, "mode": mode})
    # `--consent=VALUE`: a token is data, never an option, whatever its first character
    out = await _dome(ctx, "promote", run_id, f"--consent={gate_token}", "--approved-by", f"mcp:{mode}",
                      timeout_s=600)
    err = out.get("error")
    if isinstance(err, dict) and isinstance(err.get("code"), str):
        raise DomeError(str(err.get("message", "promote refused")), code=err["code"],
                        details=err.get("details") or {}, hints=err.get("hints") or [], retry="none")
    result = {**out, "consent_mode": mode}
    host.idempotent[key] = result
    return result


def _ledger_state(db_url: str | None, ops_root: Path, run_id: str) -> dict[str, Any] | None:
    from ledger import Ledger

    led = Ledger.open(db_url, ops_root, migrate_schema=False, must_exist=True)  # a read: creates nothing
    try:
        records = led.events(run_id)
    finally:
        led.close()
    if not records:
        return None

    def body(r: Any) -> dict[str, Any]:
        p = r.payload if isinstance(r.payload, dict) else {}
        return p.get("artifact") if isinstance(p.get("artifact"), dict) else p

    finished = [body(r) for r in records if r.topic == "run.finished"]
    started = [body(r) for r in records if r.topic == "run.started"]
    why = list((started[-1] if started else {}).get("human_gate_reasons") or [])
    promos = [body(r) for r in records if r.topic == "promotion.computed"]
    last = promos[-1] if promos else {}
    if last.get("outcome") == "promoted":
        return {"outcome": "promoted", "promoted_ref": last.get("to_ref"), "head": last.get("from_head_ref")}
    fin = finished[-1] if finished else {}
    if not fin:
        return {"outcome": "running"}
    out = {"outcome": "awaiting_consent" if fin.get("awaiting_consent") else fin.get("status"),
           "head": fin.get("head")}
    if fin.get("missing"):
        out["missing"] = fin.get("missing")
    if why and out["outcome"] == "awaiting_consent":  # why a person is asked (the front door's ref policy)
        out["reasons"] = why
    return out


async def run_state(ctx: "CallContext", run_id: str) -> dict[str, Any] | None:
    """The run's outcome as the ledger tells it now (promoted, awaiting_consent, blocked...), or None."""
    try:
        return await anyio.to_thread.run_sync(_ledger_state, ctx.host.db_url, ctx.host.ops_root, run_id)
    except Exception:  # noqa: BLE001 - no ledger (yet): no run state to add
        return None


async def run_submit(args: dict[str, Any], ctx: "CallContext") -> dict[str, Any]:
    host = ctx.host
    key = args.get("idempotency_key")
    owner = _client_name(ctx)
    if key:  # ProbeRequired: a retried submit with the same key returns the first run (of this client)
        for job in host.jobs.jobs.values():
            if job.tool == "run_submit" and job.idempotency_key == key and job.owner == owner:
                return {"run_id": job.run_id, "job_id": job.job_id, "status": job.status, "deduplicated": True}
    queue = Path(args["work_queue"])  # resolved under the read roots by the host (TOOL_PATHS)
    if not queue.is_file():
        raise DomeError(f"work queue not found: {queue}", code="FILE_NOT_FOUND", details={"path": str(queue)})
    host_paths.check_queue_repo(host.paths, queue)  # the repository too, before any process starts
    # `dome run` applies the operator's ref policy and read roots to the very queue it loads (no window
    # to swap the queue or its repository after these checks)
    extra = [f"--agent-refs={host.ref_policy.prefix}", f"--agent-risk-floor={host.ref_policy.risk_floor}",
             f"--read-roots={os.pathsep.join(map(str, host.paths.read_roots))}"]
    if owner:
        extra.append(f"--submitted-by={owner}")
    if "seed" in args:
        extra += ["--seed", str(args["seed"])]
    if "executor" in args:
        extra += ["--executor", args["executor"]]
    argv = _argv(ctx, "run", str(queue), *extra)
    runs_dir = host.ops_root / "runs"
    before = set(os.listdir(runs_dir)) if runs_dir.is_dir() else set()
    proc = await anyio.open_process(argv, env=_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=None, start_new_session=True)
    job = host.jobs.new("run_submit", owner=owner)
    job.idempotency_key = key
    host.jobs.start(job)
    have_run_id = anyio.Event()
    lines: list[dict[str, Any]] = []

    def kill(reason: str) -> None:
        job.cancel_requested = reason
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)

    job.cancel_hook = kill

    async def follow() -> None:
        buf = b""
        assert proc.stdout is not None
        async for chunk in proc.stdout:
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                with suppress(json.JSONDecodeError, UnicodeDecodeError):
                    obj = json.loads(line)
                    if isinstance(obj, dict):
                        lines.append(obj)
                        if job.run_id is None and isinstance(obj.get("run_id"), str):
                            job.run_id = obj["run_id"]
                            host.jobs.touch(job)
                            have_run_id.set()
                        frac = obj.get("progress")
                        if isinstance(frac, (int, float)):
                            host.jobs.progress(job, float(frac), obj.get("message"))
        if buf.strip():
            with suppress(json.JSONDecodeError, UnicodeDecodeError):
                obj = json.loads(buf)
                if isinstance(obj, dict):
                    lines.append(obj)
                    job.run_id = job.run_id or obj.get("run_id")
        code = await proc.wait()
        if job.cancel_requested is not None:
            with anyio.move_on_after(1.0):
                await proc.wait()
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        summary = lines[-1] if lines else {}
        outcome = EXIT_OUTCOME.get(code, "failed")
        result = {"run_id": job.run_id, "exit_code": code, "outcome": outcome, "summary": summary}
        if job.cancel_requested is not None or outcome == "cancelled":
            host.jobs.finish(job, "cancelled", result=result, error={"code": "CANCELLED", "message": job.cancel_requested
                                                                   or "run cancelled", "details": {}, "hints": [],
                                                                   "retry": "none"})
        elif code in (0, 4):  # completed, or held at a gate (blocked): the job itself succeeded
            host.jobs.finish(job, "succeeded", result=result)
        else:
            host.jobs.finish(job, "failed", result=result,
                             error={"code": "RUN_FAILED", "message": f"dome run exited {code} ({outcome})",
                                    "details": {"exit_code": code}, "hints": ["see events for the run"],
                                    "retry": "none"})
        have_run_id.set()

    if host._tg is None:
        raise Fault(FaultCategory.INVARIANT_BREACH, "host is not running")
    async def watch_runs_dir() -> None:
        # `dome run` creates ops/runs/<run_id>/ when it starts; its JSON summary comes only at the end
        while not have_run_id.is_set():
            if runs_dir.is_dir():
                new = sorted(set(os.listdir(runs_dir)) - before)
                if new and job.run_id is None:
                    job.run_id = new[0]
                    host.jobs.touch(job)
                    have_run_id.set()
                    return
            await anyio.sleep(0.05)

    host._tg.start_soon(follow)
    host._tg.start_soon(watch_runs_dir)
    with anyio.move_on_after(RUN_ID_WAIT_S):
        await have_run_id.wait()
    return {"run_id": job.run_id, "job_id": job.job_id, "status": job.status}


def _client_name(ctx: "CallContext") -> str | None:
    return ctx.client.name if ctx.client is not None else None


HANDLERS = {"run_submit": run_submit, "run_status": run_status, "events": events, "evidence": evidence,
            "verify": verify, "promote": promote}
