"""Did the action hit a sandbox limit? Checked by the runtime before it reports.

Inside dome's sandbox ($DOME_LIMITS is set) the attempt's cgroups are
readable under /dome/cgroup and /tmp and /dome/scratch are size-capped
tmpfs mounts. A limit the action ran into is a SANDBOX_VIOLATION, even
when the action itself exited 0 (a fork bomb the pids limit held, a
process the memory cgroup killed, a write cut short by a full tmpfs):
the limits held, and the attempt must not count as a success.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from registry.errors import DomeError
from registry.sandbox_verdict import counter_violations

IN_CGROUP = Path("/dome/cgroup")
FULL_BELOW_BYTES = 1024 * 1024  # a capped tmpfs with less than this left was filled to its limit


class SandboxViolation(DomeError):
    code = "SANDBOX_VIOLATION"


def _counter(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
    except (OSError, ValueError):
        pass
    return 0


def _free_bytes(path: str) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _cgroup_file(root: Path, controller: str, name: str) -> Path:
    """A controller's file: below its own directory (cgroup v1, dome's binds), else at the root (v2)."""
    p = root / controller / name
    return p if p.exists() else root / name


def violations(budget: dict[str, Any], *, cgroup_root: Path = IN_CGROUP, tmp: str = "/tmp",
               scratch: str = "/dome/scratch") -> list[dict[str, Any]]:
    """The limits an attempt ran into, from its cgroups' counters and its tmpfs mounts."""
    cgroup_root = Path(budget.get("cgroup_root") or cgroup_root)  # a container reads its own at /sys/fs/cgroup
    out = counter_violations(
        refused_forks=_counter(_cgroup_file(cgroup_root, "pids", "pids.events"), "max"),
        oom_kills=max(_counter(_cgroup_file(cgroup_root, "memory", name), "oom_kill")
                      for name in ("memory.events", "memory.oom_control")),
        before=budget.get("counted"), max_processes=budget.get("max_processes"), memory_mb=budget.get("memory_mb"))
    for kind, path, key in (("tmp_limit", tmp, "tmp_mb"), ("disk_limit", scratch, "disk_mb")):
        free = _free_bytes(path)
        if budget.get(key) and free is not None and free < FULL_BELOW_BYTES:
            out.append({"kind": kind, "path": path, "limit_mb": budget[key]})
    return out


def check(env: dict[str, str] | None = None) -> None:
    """Raise SandboxViolation when the sandbox's limits were hit (no-op outside the sandbox)."""
    raw = (env if env is not None else os.environ).get("DOME_LIMITS")
    if not raw:
        return
    found = violations(json.loads(raw))
    if found:
        kinds = ", ".join(v["kind"] for v in found)
        raise SandboxViolation(f"the action hit the sandbox's limits ({kinds})", details={"violations": found},
                               hints=["raise the work queue's `limits` if the task needs more"], retry="none")
