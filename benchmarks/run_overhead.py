"""Run-loop overhead: a 1,000-node no-op graph through the real coordinator.

What is measured (`python benchmarks/run_overhead.py [--nodes N] [--spawn-samples K]`):

1. Coordinator overhead per task: the coordinator process's CPU time
   (time.process_time) minus the stand-in workers' own thread CPU time. The real RunLoop (scheduler, grants,
   SpawnSpec validation, ledger, gateway over MCP on a Unix socket, acks)
      runs a 1,000-node no-op graph whose "workers" are in-process stand-ins
   that speak the real worker protocol to the gateway (a no-op worker's
   only call is its terminal complete_task) and exit. Also printed: wall time per task (bounded by the
   ledger's durable commits: WAL with synchronous=FULL, one fsync per
   transaction) and ledger transitions (events) per second.
2. Beside it, the bare cost of spawning the same sandboxed process: bwrap
   with the worker's exact sandbox options running `python -s -c pass`, and
   the full sandboxed worker start up to reading its SpawnSpec.

Target: coordinator overhead <= 5 ms per task.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from coordinator.executors.base import AttemptFiles, ExitInfo  # noqa: E402
from coordinator.executors.sandbox import bwrap_argv, probe_bwrap  # noqa: E402


class NullWorkers:
    """An executor whose workers are in-process threads speaking the worker protocol."""

    name = "null"

    def __init__(self, max_concurrency: int, socket_getter) -> None:
        self.max_concurrency = max_concurrency
        self._socket = socket_getter
        self._done: list[ExitInfo] = []
        self._running: set[str] = set()
        self._lock = threading.Lock()
        self.worker_s = 0.0
        self.worker_cpu_s = 0.0

    def dispatch(self, spec, files: AttemptFiles) -> None:
        from worker_sdk.client import GatewayClient
        from worker_sdk.runtime import load_worker_key, token_of
        neid = spec["node_execution_id"]
        with self._lock:
            self._running.add(neid)

        def work() -> None:
            t0 = time.perf_counter()
            c0 = time.thread_time()
            import json as _j
            import base64
            profile = _j.loads(base64.b64decode(spec["grant"]["payload"]))
            key = load_worker_key(str(files.worker_key) if files.worker_key else None, profile)
            c = GatewayClient(token=token_of(spec["grant"]), profile=profile, socket=str(self._socket()),
                              worker_key=key)
            c.complete_task("succeeded", summary={"noop": True})
            c.close()
            with self._lock:
                self.worker_s += time.perf_counter() - t0
                self.worker_cpu_s += time.thread_time() - c0
                self._running.discard(neid)
                self._done.append(ExitInfo(neid, 0))

        threading.Thread(target=work, daemon=True).start()

    def poll(self):
        with self._lock:
            out, self._done = self._done, []
        return out

    def running(self):
        with self._lock:
            return sorted(self._running)

    def kill(self, neid, reason):
        pass

    def shutdown(self):
        pass


def coordinator_overhead(nodes: int, parallel: int) -> dict:
    from coordinator.gateway import dispatch as gdispatch
    from coordinator.keys import load_keyring, load_or_create_signing_key
    from coordinator.runloop.loop import RunContext, RunLoop
    from ledger import Ledger

    tmp = Path(tempfile.mkdtemp(prefix="dome-bench-"))
    repo = tmp / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@x"}
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    (repo / "f").write_text("x\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "i"], cwd=repo, check=True, env=env)
    tasks = [{"node_id": f"n{i:04d}", "containers": [], "required_capabilities": ["write"], "required_outputs": [],
              "dependencies": [f"n{(i - 1) // 4:04d}"] if i else [],
              "action_spec": {"intent": "command", "argv": ["true"]}} for i in range(nodes)]
    q = {"artifact_kind": "dome.work.queue/v1", "repo": str(repo), "base_ref": "main", "determinism_seed": 1,
         "policy": "default", "promote_to": "refs/heads/x", "tasks": tasks,
         "scheduling": {"max_parallel": parallel, "endgame_max_duplicates": 0}}
    (tmp / "q.json").write_text(json.dumps(q))
    ops = tmp / "ops"
    ops.mkdir()
    ledger = Ledger.open(None, ops)
    signer = load_or_create_signing_key(ops)
    holder: dict = {}
    execu = NullWorkers(parallel, lambda: holder["loop"].socket)
    handler_s = [0.0]
    orig_guard = gdispatch.ToolDispatcher.guard

    def timed_guard(fn):
        c0 = time.thread_time()
        try:
            return orig_guard(fn)
        finally:
            handler_s[0] += time.thread_time() - c0  # grant verification + tool + ledger, CPU of the call

    gdispatch.ToolDispatcher.guard = staticmethod(timed_guard)
    ctx = RunContext(ledger=ledger, ops_root=ops, signer=signer, keyring=load_keyring(ops), sandbox="none",
                     executor=execu)
    loop = RunLoop.start(tmp / "q.json", ctx)
    holder["loop"] = loop
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    out = loop.run()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    gdispatch.ToolDispatcher.guard = staticmethod(orig_guard)
    events = len(ledger.events(out.run_id))
    coord_cpu = cpu - execu.worker_cpu_s
    return {"nodes": nodes, "parallel": parallel, "status": out.status, "events": events,
            "wall_s": round(wall, 3), "wall_ms_per_task": round(wall / nodes * 1000, 3),
            "coordinator_cpu_ms_per_task": round(coord_cpu / nodes * 1000, 3),
            "worker_standin_cpu_ms_per_task": round(execu.worker_cpu_s / nodes * 1000, 3),
            "loop_cpu_ms_per_task": round(loop.timings["coordinator_cpu_s"] / nodes * 1000, 3),
            "gateway_tool_cpu_ms_per_task": round(handler_s[0] / nodes * 1000, 3),
            "mcp_transport_and_other_cpu_ms_per_task": round(
                (coord_cpu - loop.timings["coordinator_cpu_s"] - handler_s[0]) / nodes * 1000, 3),
            "ledger_transitions_per_s": round(events / wall, 1),
            "events_per_task": round(events / nodes, 2)}


def spawn_cost(samples: int) -> dict:
    ok, bwrap = probe_bwrap()
    if not ok:
        return {"available": False, "reason": bwrap}
    tmp = Path(tempfile.mkdtemp(prefix="dome-bench-spawn-"))
    for d in ("scratch", "base.git", "logs"):
        (tmp / d).mkdir()
    (tmp / "spawn.json").write_text(json.dumps(_schema_valid_spec()))
    (tmp / "refused.json").write_text("{}")
    (tmp / "pub").write_text("x y\n")
    (tmp / "sock").write_text("")
    files = AttemptFiles(tmp / "spawn.json", tmp / "scratch", tmp / "base.git", tmp / "sock", tmp / "pub", tmp / "logs")
    argv = bwrap_argv(files, bwrap=bwrap)
    cut = argv.index("--")
    bare = argv[:cut + 1] + [sys.executable, "-s", "-c", "pass"]
    # the real worker: reads and checks its SpawnSpec (schema-valid), then stops at the stand-in coordinator key
    start = argv
    # the same sandbox given a spec the schema refuses: the full validator is loaded to name the problems
    refused = [a if a != str(tmp / "spawn.json") else str(tmp / "refused.json") for a in argv]

    def timeit(cmd):
        ts = []
        for _ in range(samples):
            t0 = time.perf_counter()
            subprocess.run(cmd, capture_output=True)
            ts.append((time.perf_counter() - t0) * 1000)
        return round(statistics.median(ts), 1)

    return {"available": True, "samples": samples, "bwrap_python_pass_ms": timeit(bare),
            "python_pass_unsandboxed_ms": timeit([sys.executable, "-s", "-c", "pass"]),
            "sandboxed_worker_start_ms": timeit(start),
            "sandboxed_worker_start_refused_spec_ms": timeit(refused)}


def _schema_valid_spec() -> dict:
    """A SpawnSpec its schema accepts (its grant is not a real one: the worker stops after the check)."""
    d = "sha256:" + "0" * 64
    return {"artifact_kind": "dome.spawn_spec/v1", "version": "1.0.0", "run_id": "run-bench", "wave_id": "w-1",
            "node_id": "a", "node_execution_id": "ne-0000000000000000", "task_id": "a", "task_spec_ref": d,
            "tool_profile_ref": d, "container_ref": "host@" + d,
            "action_spec": {"intent": "command", "argv": ["true"]}, "determinism_seed": 1, "inputs_hash": d,
            "base_ref": "0" * 40, "base_tree_hash": "0" * 40, "attempt": 1, "created_at": "2026-11-26T00:00:00Z",
            "gateway": {"socket": "/dome/gateway.sock"},
            "grant": {"payloadType": "application/vnd.dome.toolprofile+json", "payload": "e30=",
                      "signatures": [{"keyid": "k", "sig": "c2ln"}]}, "timeout_s": 60}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--spawn-samples", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--spawn-only", action="store_true", help="only the sandboxed spawn and worker start figures")
    a = ap.parse_args()
    if a.spawn_only:
        s = spawn_cost(a.spawn_samples)
        print(json.dumps(s, indent=2) if a.json else
              f"bare sandboxed spawn (bwrap + python -c pass): {s.get('bwrap_python_pass_ms')} ms; sandboxed worker "
              f"start: {s.get('sandboxed_worker_start_ms')} ms; with a refused SpawnSpec (full validator loaded): "
              f"{s.get('sandboxed_worker_start_refused_spec_ms')} ms  (median of {s.get('samples')})")
        return
    res = {"coordinator": coordinator_overhead(a.nodes, a.parallel), "spawn": spawn_cost(a.spawn_samples)}
    if a.json:
        print(json.dumps(res, indent=2))
        return
    c, s = res["coordinator"], res["spawn"]
    print(f"{c['nodes']}-node no-op graph, {c['parallel']} in flight: status {c['status']}, {c['events']} events")
    print(f"  coordinator CPU per task (stand-in workers excluded): {c['coordinator_cpu_ms_per_task']} ms; "
          f"target <= 5 ms")
    print(f"    run loop (scheduler, grants, SpawnSpecs, ledger) {c['loop_cpu_ms_per_task']} ms; gateway tools "
          f"(verify + tool + ledger) {c['gateway_tool_cpu_ms_per_task']} ms; MCP/HTTP transport and the rest "
          f"{c['mcp_transport_and_other_cpu_ms_per_task']} ms")
    print(f"  wall per task incl. stand-in workers: {c['wall_ms_per_task']} ms; "
          f"ledger transitions/s: {c['ledger_transitions_per_s']}")
    if s.get("available"):
        print(f"  bare sandboxed spawn (bwrap + python -c pass): {s['bwrap_python_pass_ms']} ms; "
              f"unsandboxed python -c pass: {s['python_pass_unsandboxed_ms']} ms; "
              f"sandboxed worker start: {s['sandboxed_worker_start_ms']} ms; with a refused SpawnSpec: "
              f"{s['sandboxed_worker_start_refused_spec_ms']} ms  (median of {s['samples']})")


if __name__ == "__main__":
    main()
