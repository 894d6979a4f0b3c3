"""LocalExecutor: each attempt is a fresh `python -m worker_sdk` under bubblewrap.

The worker process is the leader of its own process group; `kill` sends
SIGKILL to the whole group and to every process left in the attempt's pids
cgroup, and bwrap's PID namespace takes the rest down with it. With
`sandbox="none"` (explicit opt-in) the same worker runs unconfined.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .base import AttemptFiles, ExitInfo, Limits, SandboxUnavailable
from .sandbox import (bwrap_argv, cpus_per_worker, direct_argv, direct_env, make_preexec, pids_cgroup_parent,
                      probe_bwrap)

STDERR_TAIL = 4096


@dataclass
class _Proc:
    popen: subprocess.Popen
    files: AttemptFiles
    cgroup: Path | None
    killed: str | None = None


class LocalExecutor:
    name = "local"

    def __init__(self, *, sandbox: str = "bwrap", max_concurrency: int = 4, limits: Limits | None = None) -> None:
        if sandbox not in ("bwrap", "none"):
            raise ValueError(f"unknown sandbox {sandbox!r}")
        if sandbox == "bwrap":
            ok, info = probe_bwrap()
            if not ok:
                raise SandboxUnavailable(f"no sandbox available: {info}", details={"reason": info},
                                         hints=SandboxUnavailable.hints_default)
            self.bwrap = info
        self.sandbox = sandbox
        self.max_concurrency = max_concurrency
        self.limits = limits or Limits()
        self.cgroup_parent = pids_cgroup_parent() if sandbox == "bwrap" else None
        if self.cgroup_parent is not None:  # groups left behind by a killed coordinator (empty ones only)
            for child in self.cgroup_parent.iterdir():
                if child.is_dir() and child.name.startswith("ne-"):
                    try:
                        child.rmdir()
                    except OSError:
                        pass
        self._procs: dict[str, _Proc] = {}
        self._lock = threading.Lock()

    def _cgroup_for(self, neid: str) -> Path | None:
        if self.cgroup_parent is None:
            return None
        cg = self.cgroup_parent / neid
        try:
            cg.mkdir(exist_ok=True)
            (cg / "pids.max").write_text(str(self.limits.max_processes))
            return cg
        except OSError:
            return None

    def dispatch(self, spec: Mapping[str, Any], files: AttemptFiles) -> None:
        neid = spec["node_execution_id"]
        files.log_dir.mkdir(parents=True, exist_ok=True)
        cg = self._cgroup_for(neid)
        cpus = cpus_per_worker(self.max_concurrency)  # workers size their thread pools from it
        if self.sandbox == "bwrap":
            argv, env = bwrap_argv(files, bwrap=self.bwrap, cpus=cpus), {}
        else:
            argv, env = direct_argv(files), direct_env(files, cpus=cpus)
        out = open(files.log_dir / "worker.stdout", "wb")
        err = open(files.log_dir / "worker.stderr", "wb")
        try:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                                 start_new_session=True, preexec_fn=make_preexec(self.limits, cg), close_fds=True)
        finally:
            out.close()
            err.close()
        with self._lock:
            self._procs[neid] = _Proc(p, files, cg)

    def running(self) -> list[str]:
        with self._lock:
            return sorted(self._procs)

    def _sweep(self, proc: _Proc) -> list[dict[str, Any]]:
        violations: list[dict[str, Any]] = []
        cg = proc.cgroup
        if cg is None:
            return violations
        try:
            events = (cg / "pids.events").read_text().split()
            if len(events) >= 2 and int(events[1]) > 0:
                violations.append({"kind": "process_limit", "limit": self.limits.max_processes,
                                   "refused_forks": int(events[1])})
        except (OSError, ValueError):
            pass
        for _ in range(50):
            try:
                pids = [int(x) for x in (cg / "cgroup.procs").read_text().split()]
            except OSError:
                break
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            cg.rmdir()
        except OSError:
            pass
        return violations

    def poll(self) -> list[ExitInfo]:
        out: list[ExitInfo] = []
        with self._lock:
            done = [(n, p) for n, p in self._procs.items() if p.popen.poll() is not None]
            for n, _ in done:
                del self._procs[n]
        for neid, proc in done:
            rc = proc.popen.returncode
            violations = self._sweep(proc)
            try:
                tail = (proc.files.log_dir / "worker.stderr").read_bytes()[-STDERR_TAIL:].decode("utf-8", "replace")
            except OSError:
                tail = ""
            out.append(ExitInfo(neid, rc if rc is not None and rc >= 0 else None,
                                signal=-rc if rc is not None and rc < 0 else None,
                                stderr_tail=tail, violations=violations))
        return out

    def kill(self, node_execution_id: str, reason: str) -> None:
        with self._lock:
            proc = self._procs.get(node_execution_id)
        if proc is None:
            return
        proc.killed = reason
        try:
            os.killpg(proc.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if proc.cgroup is not None:
            try:
                for pid in (proc.cgroup / "cgroup.procs").read_text().split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            except OSError:
                pass

    def shutdown(self) -> None:
        for neid in self.running():
            self.kill(neid, "shutdown")
        with self._lock:
            procs = list(self._procs.values())
        for p in procs:
            try:
                p.popen.wait(5)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass
        self.poll()
