"""RayExecutor: the same sandboxed worker, started as a Ray task.

Each attempt is a Ray task that runs exactly the LocalExecutor's command
line (bubblewrap, rlimits, pids cgroup) on whichever Ray node gets it, with
`num_gpus` taken from the node's container requirements (an image whose
name says cuda or gpu asks for one GPU). The task returns only the exit
status: results travel through the gateway, never through Ray's object
store. `kill` is `ray.cancel(force=True)`, which kills the Ray worker
process; the sandbox dies with it (PR_SET_PDEATHSIG and --die-with-parent).

Scope today: the gateway and the egress gate (model calls of `agent`
workers) are Unix sockets in the coordinator's temporary directory, bound
into the sandbox exactly as the LocalExecutor binds them. Every attempt is
therefore pinned to the coordinator's own Ray node (a hard node-affinity
strategy): on a multi-host cluster an attempt waits for that node rather
than starting on a host where the sockets do not exist. A TCP gateway for
multi-host clusters is future work.
"""
from __future__ import annotations

import os

import re
import threading
from typing import Any, Mapping

from .base import AttemptFiles, ExitInfo, Limits
from .sandbox import bwrap_argv, direct_argv, direct_env, require_bwrap

GPU_IMAGE = re.compile(r"(cuda|gpu)", re.IGNORECASE)


def gpus_for(container_ref: str) -> int:
    name = container_ref.split("@", 1)[0]
    return 1 if GPU_IMAGE.search(name) else 0


def _attempt(argv: list[str], env: dict[str, str], log_dir: str, limits: dict[str, int]) -> dict[str, Any]:
    import os
    import subprocess
    from pathlib import Path

    from coordinator.executors.base import Limits as _L
    from coordinator.executors.sandbox import make_preexec

    Path(log_dir).mkdir(parents=True, exist_ok=True)
    with open(os.path.join(log_dir, "worker.stdout"), "wb") as out, \
            open(os.path.join(log_dir, "worker.stderr"), "wb") as err:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env or None,
                             start_new_session=True, preexec_fn=make_preexec(_L(**limits), None))
        rc = p.wait()
    return {"returncode": rc}


class RayExecutor:
    name = "ray"

    def __init__(self, *, sandbox: str = "bwrap", max_concurrency: int = 4, limits: Limits | None = None,
                 ray_init: Mapping[str, Any] | None = None) -> None:
        import ray

        if sandbox == "bwrap":
            self.bwrap = require_bwrap()
        self.sandbox = sandbox
        self.max_concurrency = max_concurrency
        self.limits = limits or Limits()
        if not ray.is_initialized():
            if ray_init is None and os.environ.get("RAY_ADDRESS"):
                ray.init(log_to_driver=False)  # join the cluster named by RAY_ADDRESS; it sets the resources
            else:
                ray.init(**(dict(ray_init) if ray_init else {"num_cpus": max_concurrency, "include_dashboard": False,
                                                              "log_to_driver": False}))
        self._ray = ray
        self.node_id = ray.get_runtime_context().get_node_id()  # the coordinator's host: where the sockets are
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        self._strategy = NodeAffinitySchedulingStrategy(node_id=self.node_id, soft=False)
        self._remote = ray.remote(max_retries=0)(_attempt)
        self._refs: dict[str, Any] = {}
        self._files: dict[str, AttemptFiles] = {}
        self._lock = threading.Lock()

    def dispatch(self, spec: Mapping[str, Any], files: AttemptFiles) -> None:
        if self.sandbox == "bwrap":
            argv, env = bwrap_argv(files, bwrap=self.bwrap, limits=self.limits, cpus=1), {}  # each task is scheduled with num_cpus=1
        else:
            argv, env = direct_argv(files), direct_env(files, cpus=1)
        lim = {k: getattr(self.limits, k) for k in Limits.__dataclass_fields__}
        ref = self._remote.options(num_gpus=gpus_for(spec["container_ref"]), num_cpus=1,
                                   scheduling_strategy=self._strategy).remote(
            argv, env, str(files.log_dir), lim)
        with self._lock:
            self._refs[spec["node_execution_id"]] = ref
            self._files[spec["node_execution_id"]] = files

    def running(self) -> list[str]:
        with self._lock:
            return sorted(self._refs)

    def poll(self) -> list[ExitInfo]:
        with self._lock:
            refs = dict(self._refs)
        if not refs:
            return []
        ready, _ = self._ray.wait(list(refs.values()), num_returns=len(refs), timeout=0)
        ready_set = set(ready)
        out = []
        for neid, ref in refs.items():
            if ref not in ready_set:
                continue
            with self._lock:
                self._refs.pop(neid, None)
                files = self._files.pop(neid)
            try:
                rc = self._ray.get(ref)["returncode"]
            except Exception:  # noqa: BLE001 - cancelled or crashed task
                rc = -9
            try:
                tail = (files.log_dir / "worker.stderr").read_bytes()[-4096:].decode("utf-8", "replace")
            except OSError:
                tail = ""
            out.append(ExitInfo(neid, rc if rc >= 0 else None, signal=-rc if rc < 0 else None, stderr_tail=tail))
        return out

    def kill(self, node_execution_id: str, reason: str) -> None:
        with self._lock:
            ref = self._refs.get(node_execution_id)
        if ref is not None:
            self._ray.cancel(ref, force=True)

    def shutdown(self) -> None:
        for neid in self.running():
            self.kill(neid, "shutdown")
        import time
        deadline = time.monotonic() + 10
        while self.running() and time.monotonic() < deadline:
            self.poll()
            time.sleep(0.05)
