"""TEST-ONLY worker tools (served only when DOME_MCP_TEST_TOOLS=1).

Deliberately slow, crashing and noisy tools that exercise the host's fault
paths: cancellation reaching a loop, a worker dying mid-call under each
replay contract, worker-held session state, and stdout contamination.
This module prints to stdout when imported, on purpose (a "noisy import").
"""
from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

print("mcp_testing: noise at import time (must never reach the protocol pipe)")

_SESSIONS: dict[str, dict[str, Any]] = {}


def test_echo(req: dict[str, Any]) -> dict[str, Any]:
    return {"echo": req.get("value"), "n": req.get("n"), "pid_is_worker": True}


def test_slow(req: dict[str, Any], *, token, progress: Callable[[float, str], None]) -> dict[str, Any]:
    steps = int(req.get("steps", 50))
    step_s = float(req.get("step_s", 0.05))
    hb = req.get("heartbeat")
    for i in range(steps):
        token.check()  # the loop boundary the host's cancellation reaches
        if hb:
            Path(hb).write_text(str(i))
        time.sleep(step_s)
        progress((i + 1) / steps, f"step {i + 1}/{steps}")
    return {"steps": steps, "completed": True}


def _crash_once(marker: str) -> None:
    m = Path(marker)
    if not m.exists():
        m.write_text(str(os.getpid()))
        sys.stderr.flush()
        os._exit(70)  # a hard crash mid-call


def test_crash_convergent(req: dict[str, Any]) -> dict[str, Any]:
    _crash_once(req["marker"])
    return {"survived": True, "attempt_pid": os.getpid()}


def test_crash_probe(req: dict[str, Any]) -> dict[str, Any]:
    effect = Path(req["effect"])
    if not Path(req["marker"]).exists() and req.get("commit_before_crash"):
        effect.write_text("committed")
    _crash_once(req["marker"])
    effect.write_text("committed")
    return {"committed": True, "effect": str(effect)}


def probe_crash_probe(req: dict[str, Any]) -> dict[str, Any]:
    effect = Path(req["effect"])
    if effect.exists():
        return {"effect": "present", "result": {"committed": True, "effect": str(effect), "recovered_by_probe": True}}
    return {"effect": "absent"}


def test_crash_never(req: dict[str, Any]) -> dict[str, Any]:
    _crash_once(req["marker"])
    return {"survived": True}


def test_crash_now(req: dict[str, Any]) -> dict[str, Any]:
    os._exit(71)


def test_noisy(req: dict[str, Any]) -> dict[str, Any]:
    import worker_sdk.testing.noisy_import  # noqa: F401  (prints at import)

    for i in range(int(req.get("lines", 3))):
        print(f"noisy print {i}")
    sys.stdout.flush()
    os.write(1, b"raw write to fd 1\n")
    subprocess.run(["sh", "-c", "echo child writes to fd 1; echo child stderr >&2"], check=True)
    subprocess.run([sys.executable, "-c", "print('python child print')"], check=True)
    return {"noisy": True}


def test_session_open(req: dict[str, Any]) -> dict[str, Any]:
    path = Path(req["path"])
    data = path.read_bytes()
    sid = "ses_" + secrets.token_hex(6)
    _SESSIONS[sid] = {"path": str(path), "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    return {"session_id": sid, "source": {"path": str(path), "sha256": _SESSIONS[sid]["sha256"]}}


def test_session_read(req: dict[str, Any]) -> dict[str, Any]:
    from registry.errors import DomeError

    s = _SESSIONS.get(req["session_id"])
    if s is None:
        raise DomeError(f"no session {req['session_id']}", code="SESSION_NOT_FOUND",
                        details={"session_id": req["session_id"]})
    return {"session_id": req["session_id"], "size": s["size"], "sha256": s["sha256"], "worker_pid": os.getpid()}
