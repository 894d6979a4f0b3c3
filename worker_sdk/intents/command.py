"""The generic `command` intent: run argv in the scratch checkout.

`{"intent": "command", "argv": [...], "env": {...}}`; in resolver mode
(`params.resolver`) see `resolver_invocation`. The program runs in
its own session (process group) with a minimal environment plus `env`,
under Landlock (write only beneath the scratch checkout and a private temp
directory; no TCP) when the kernel has it. Whatever it changes in the
checkout becomes the PatchProposal. The runtime's watchdog stops it when
the token is cancelled or when the sandbox's process count passes
`limits.max_processes` (a fork bomb): the whole group is killed and the
attempt fails with SANDBOX_VIOLATION.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


from ..cancel import Cancelled
from ..sandbox_limits import SandboxViolation
from . import IntentContext, IntentFailed, IntentResult

TAIL_BYTES = 4096
SAFE_ENV = ("PATH", "LANG", "LC_ALL", "TZ")


def _count_processes() -> int:
    try:
        return sum(1 for name in os.listdir("/proc") if name.isdigit())
    except OSError:  # pragma: no cover
        return 0


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _tail(path: Path) -> str:
    data = path.read_bytes()
    return data[-TAIL_BYTES:].decode("utf-8", "replace")


def command_not_found(argv: list[str], path: str) -> IntentFailed:
    """COMMAND_NOT_FOUND saying what this sandbox shows: its PATH and the tool folders bound
    into it, and how to show another (a folder outside those is hidden from workers)."""
    tools = [d for d in os.environ.get("DOME_TOOL_DIRS", "").split(":") if d]
    first = argv[0]
    hidden = first.startswith("/") and not any(first == d or first.startswith(d.rstrip("/") + "/") for d in tools)
    shown = "tool folders " + ", ".join(tools) if tools else "no tool folders"
    where = f"PATH {path}" if "/" not in first else "its path"
    folder = str(Path(first).parent.parent if Path(first).parent.name == "bin" else Path(first).parent)
    return IntentFailed(
        f"command not found: {first} (looked up in the sandbox by {where}; it shows the system "
        f"directories, the Python installation and {shown})", code="COMMAND_NOT_FOUND",
        details={"argv": argv, "path": path, "tool_dirs": tools},
        hints=[f"show its folder to workers: \"tool_dirs\": [\"{folder}\"] in the work queue, or "
               f"dome run --tool-dir {folder}"] if hidden else
        ["install the tool in the Python installation dome runs on, or name a folder in tool_dirs"])


def landlocked_popen(argv: list[str], writable: list[str] | None, connect_ports: tuple[int, ...],
                     **popen: Any) -> subprocess.Popen:
    """Popen of argv under Landlock (`writable`; None: no Landlock). Landlock binds the thread that
    restricts itself and whatever that thread starts, so the ruleset goes on a short-lived thread of
    its own, which then starts the program: the runtime's other threads stay as they were, and with
    no preexec_fn CPython starts the program by vfork rather than copying the whole runtime with fork
    (most of a trivial command's cost)."""
    if writable is None:
        return subprocess.Popen(argv, **popen)
    from .. import landlock

    box: dict[str, Any] = {}

    def start() -> None:
        try:
            landlock.restrict(writable, connect_ports=connect_ports)
            box["proc"] = subprocess.Popen(argv, **popen)
        except BaseException as exc:  # noqa: BLE001 - raised on the caller's thread below
            box["error"] = exc

    thread = threading.Thread(target=start, name="dome-landlocked-start")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["proc"]


def execute(ctx: IntentContext, argv: list[str], env: dict[str, str], *, cwd: Path,
            connect_ports: tuple[int, ...] = ()) -> dict:
    """Run argv; returns {exit_code, stdout_tail, stderr_tail, logs} or raises."""
    tmp = Path(tempfile.mkdtemp(prefix="dome-cmd-"))
    out_path, err_path = tmp / "stdout", tmp / "stderr"
    base_env = {k: os.environ[k] for k in SAFE_ENV if k in os.environ}
    base_env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    full_env = {**base_env, "HOME": str(tmp), "TMPDIR": str(tmp), **env}
    use_landlock = bool(ctx.limits.get("landlock", True))
    writable = [str(cwd), str(tmp), "/dev"]
    max_procs = int(ctx.limits.get("max_processes", 0) or 0)

    ctx.token.check()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        try:
            proc = landlocked_popen(argv, writable if use_landlock else None, connect_ports, cwd=cwd, env=full_env,
                                    stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        except FileNotFoundError as exc:
            raise command_not_found(argv, full_env.get("PATH", "")) from exc
        violation = None
        last_beat = time.monotonic()
        while True:
            try:
                rc = proc.wait(timeout=0.05)
                break
            except subprocess.TimeoutExpired:
                pass
            if ctx.token.cancelled:
                _kill_group(proc)
                raise Cancelled(f"command cancelled: {ctx.token.reason}")
            if max_procs and _count_processes() > max_procs:
                violation = {"kind": "process_limit", "limit": max_procs}
                _kill_group(proc)
                try:
                    os.kill(-1, signal.SIGKILL)  # in the worker's PID namespace: every other process
                except (ProcessLookupError, PermissionError):
                    pass
                rc = proc.returncode
                break
            if time.monotonic() - last_beat > 2.0:
                last_beat = time.monotonic()
                ctx.progress(0.5, "running")
    result = {"exit_code": rc, "stdout_tail": _tail(out_path), "stderr_tail": _tail(err_path)}
    logs = []
    for name, p in (("stdout", out_path), ("stderr", err_path)):
        data = p.read_bytes()
        if data:
            logs.append({"kind": f"log:{name}", "digest": ctx.put_artifact(data, "text/plain")})
    result["logs"] = logs
    if violation:
        raise SandboxViolation("the action exceeded the sandbox's process limit (fork bomb?)",
                               details={**violation, **{k: result[k] for k in ("stderr_tail",)}})
    return result


def resolver_invocation(action: dict, resolver: dict, tmp: Path) -> tuple[list[str], dict[str, str]]:
    """Resolver mode (`params.resolver`, set by the coordinator): the checkout is the
    integration head; the command gets the dropped proposal's diff and intent and
    runs `params.resolve_argv`, or the task's own argv again (the intent redone on the head)."""
    diff = tmp / "dropped.diff"
    diff.write_text(str(resolver.get("diff", "")), encoding="utf-8", errors="surrogateescape")
    conflicts = tmp / "conflicts.json"
    conflicts.write_text(json.dumps(resolver.get("conflicts", []), sort_keys=True))
    env = {**dict(action.get("env", {})), "DOME_RESOLVE": "1",
           "DOME_RESOLVE_PROPOSAL": str(resolver.get("proposal_id", "")),
           "DOME_RESOLVE_DIFF": str(diff), "DOME_RESOLVE_CONFLICTS": str(conflicts),
           "DOME_RESOLVE_HEAD": str(resolver.get("head_ref", "")), "DOME_RESOLVE_TRY": str(resolver.get("try", 1))}
    return list(action.get("resolve_argv") or action["argv"]), env


def run(ctx: IntentContext) -> IntentResult:
    action = ctx.action
    cwd = ctx.scratch / action.get("cwd", ".") if action.get("cwd") else ctx.scratch
    argv, env = list(action["argv"]), dict(action.get("env", {}))
    if isinstance(action.get("resolver"), dict):
        argv, env = resolver_invocation(action, action["resolver"], Path(tempfile.mkdtemp(prefix="dome-resolve-")))
    res = execute(ctx, argv, env, cwd=cwd)
    ok = ok_exit_codes(action)
    if res["exit_code"] not in ok:
        raise IntentFailed(f"command exited with {res['exit_code']}" +
                           (f" (ok_exit_codes: {sorted(ok)})" if ok != {0} else ""), code="COMMAND_FAILED",
                           details={"exit_code": res["exit_code"], "stderr_tail": res["stderr_tail"][-1024:],
                                    "logs": res["logs"], "ok_exit_codes": sorted(ok)}, retry="light")
    return IntentResult(summary={"exit_code": res["exit_code"], "stdout_tail": res["stdout_tail"][-1024:]},
                        evidence=res["logs"], metrics={})


def ok_exit_codes(action: dict) -> set[int]:
    """The exit codes a command task counts as success: `ok_exit_codes`, default {0}
    (tools such as pyupgrade exit 1 when they rewrote a file)."""
    return {int(c) for c in action.get("ok_exit_codes") or (0,)}


def suite(ctx: IntentContext) -> IntentResult:
    """The `command` validation suite: passed iff argv exits 0 on the checkout."""
    res = execute(ctx, list(ctx.action["argv"]), dict(ctx.action.get("env", {})), cwd=ctx.scratch)
    return IntentResult(summary={"passed": res["exit_code"] == 0, "exit_code": res["exit_code"],
                                 "stderr_tail": res["stderr_tail"][-1024:]},
                        evidence=res["logs"], metrics={})
