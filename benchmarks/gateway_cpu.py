"""The coordinator's CPU per worker call: the gateway as it is beside its earlier configuration.

    python benchmarks/gateway_cpu.py [--tasks 150] [--rounds 4] [--json]

One real gateway (the MCP SDK server on its Unix socket, sender-bound grants with MAC call
proofs, the SQLite ledger through the run's single writer, the blob store). Each simulated
task is one attempt as a run makes it: a fresh grant, then the worker's own client
(worker_sdk.client.GatewayClient) uploads the diff (put_artifact), submits the PatchProposal
(submit_patch) and reports the result (complete_task): three calls, whatever the requests. The figure is the coordinator's side
only: the CPU of every thread but the one driving the client (process CPU minus that
thread's), per call and per task. Issuing the grants and building the proposals happen
outside the measured windows.

Configurations, run in alternating rounds in the same process so the shared machine's load
hits both alike:
- `before`: the gateway's earlier setup: jsonschema for every gateway call's arguments and
  each PatchProposal, and the SDK's OpenTelemetry span per request with no tracer to take it;
- `after`: the small schema checker on those paths (jsonschema only for a document that
  fails), no span without a tracer provider, and the task's three calls in one request
  (complete_task carrying the put_artifact and submit_patch, each with its own proof), as
  the worker runtime sends them, committed in one durable ledger transaction (each call a
  savepoint of it);
- `per_call_tx`: `after`, but each of the request's calls commits its own durable
  transaction (the gateway before one commit per request): the baseline of that change;
- `sdk_path`: `after` with the gateway's direct path off (`WorkerGateway(direct=False)`):
  the request goes through Starlette, the SDK's transport checks and its ServerRunner, and
  the handlers run through AnyIO's thread hop, as before the direct path: its baseline.

Besides the coordinator's CPU, the CPU of each gateway's event-loop thread (uvicorn and
whatever answers the request on it) is measured on its own, from the thread's CPU clock.

The ledger lives under $TMPDIR (or --dir): run it once with TMPDIR=/dev/shm (tmpfs: no fsync
cost) and once on disk to see what the saved WAL fsyncs are worth there.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def make_repo(root: Path) -> tuple[Path, str, str]:
    """A one-commit repository and its (path, commit, tree)."""
    repo = root / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "README").write_text("bench\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "base")
    return repo, _git(repo, "rev-parse", "HEAD"), _git(repo, "rev-parse", "HEAD^{tree}")


@contextlib.contextmanager
def configuration(name: str) -> Iterator[None]:
    """`before` puts back jsonschema on the gateway's per-call checks (as the gateway had them)."""
    from coordinator.gateway import worker_tools
    from registry import schema_store
    if name != "before":
        yield
        return
    saved = worker_tools.schema_validate
    worker_tools.schema_validate = schema_store.validate
    try:
        yield
    finally:
        worker_tools.schema_validate = saved


class Bench:
    def __init__(self, work: Path) -> None:
        from coordinator import runstate as rs
        from coordinator.gateway.dispatch import ToolDispatcher
        from coordinator.gateway.server import WorkerGateway
        from coordinator.gateway.worker_tools import GatewayBackend, build_tools
        from coordinator.grants import GrantVerifier
        from coordinator.keys import load_keyring, load_or_create_signing_key
        from coordinator.runloop.writer import LedgerWriter, WriterLedger
        from coordinator.runstate import RunState
        from ledger import Ledger

        (work / "ops").mkdir()
        self.work = work
        self.repo, self.base, self.tree = make_repo(work)
        self.ledger = Ledger.open(None, work / "ops")
        self.signer = load_or_create_signing_key(work / "ops")
        self.run = "bench"
        self.writer = LedgerWriter(self.ledger, self.run, self.signer, RunState())
        self.writer.append(rs.RUN_STARTED, {"base_ref": self.base})
        self.attempts: dict[str, dict[str, Any]] = {}
        self.verifier = GrantVerifier(load_keyring(work / "ops"), WriterLedger(self.writer))
        backend = GatewayBackend(run_id=self.run, writer=self.writer, blobs=self.ledger.blobs,
                                 attempt=self.attempts.get)
        self.gateways = {}
        for name, telemetry in (("before", True), ("after", None), ("per_call_tx", None), ("sdk_path", None)):
            dispatcher = ToolDispatcher(build_tools(backend))
            if name == "before":  # jsonschema's is_valid for every call's arguments, as before
                for spec in dispatcher.specs.values():
                    spec.schema.passes = spec.schema.validator.is_valid
            gw = WorkerGateway(run_id=self.run, verifier=self.verifier, dispatcher=dispatcher,
                               socket_path=work / f"gw-{name}.sock", attempt=self.attempts.get, telemetry=telemetry,
                               direct=name not in ("before", "sdk_path"))
            gw.one_commit = name != "per_call_tx"
            gw.start()
            self.gateways[name] = gw
        self.n = 0
        self.commits = 0
        self.ledger._crash = self  # the ledger's commit hook: counts durable commits

    def after_commit(self, topics: Any) -> None:
        self.commits += 1

    def attempt(self, gateway: str) -> Callable[[], None]:
        """A fresh attempt (grant, proposal) and the worker's calls for it, ready to run."""
        from coordinator import runstate as rs
        from coordinator.gateway import auth as grants_io
        from registry.signing import SigningKey
        from worker_sdk.client import GatewayClient
        from worker_sdk.proposal import build_proposal

        self.n += 1
        neid, node = f"ne-{self.n:06d}", f"n{self.n:06d}"
        self.attempts[neid] = {"node_id": node, "wave_id": "w1", "base_ref": self.base,
                               "base_tree_hash": self.tree, "task": {"node_id": node}}
        self.writer.append(rs.TASK_DISPATCHED, {"node_execution_id": neid}, node_id=node, node_execution_id=neid)
        wk = SigningKey.generate()
        g, issued = grants_io.issue(key=self.signer, run_id=self.run, wave_id="w1", node_id=node,
                                    node_execution_id=neid, capabilities=["write"], ttl_s=3600,
                                    policy_id="default", seed=1, inputs_hash="sha256:" + "0" * 64,
                                    worker_public_key=wk.public.raw)
        self.writer.append("grant.issued", issued, node_id=node, node_execution_id=neid)
        self.verifier.bind_call_key(g.jti, wk)
        client = GatewayClient(token=g.token, profile=dict(g.payload),
                               socket=str(self.gateways[gateway].socket_path), worker_key=wk)
        (self.repo / "out").mkdir(exist_ok=True)
        (self.repo / "out" / f"i{self.n}.txt").write_text(f"{self.n}\n")
        spawn = {"base_ref": self.base, "base_tree_hash": self.tree, "run_id": self.run, "wave_id": "w1",
                 "node_id": node, "node_execution_id": neid, "action_spec": {"intent": "command"},
                 "determinism_seed": 1, "inputs_hash": "sha256:" + "0" * 64}
        staged: dict[str, bytes] = {}

        def keep(data: bytes) -> str:
            staged["diff"] = data
            from registry.canonical import digest_bytes
            return digest_bytes(data)
        proposal, _ = build_proposal(self.repo, spawn=spawn, profile=dict(g.payload), upload=keep)
        (self.repo / "out" / f"i{self.n}.txt").unlink()

        def calls() -> int:
            if gateway == "before":  # three requests
                client.put_artifact(staged["diff"], "text/x-diff", "patch.diff")
                pid = client.submit_patch(proposal)["proposal_id"]
                client.complete_task("succeeded", summary={}, proposal_id=pid)
                client.close()
                return 3
            client.put_artifact_carried(staged["diff"], "text/x-diff", "patch.diff")  # one request
            pid = client.submit_patch_carried(proposal)
            done = client.complete_task("succeeded", summary={}, proposal_id=pid)
            assert [c["tool"] for c in done["carried"]] == ["put_artifact", "submit_patch"], done
            client.close()
            return 1
        return calls

    def close(self) -> None:
        for gw in self.gateways.values():
            gw.stop()
        self.verifier.close()
        self.ledger.close()


def measure(bench: Bench, name: str, tasks: int) -> dict[str, float]:
    """Coordinator CPU (every thread but this one) over `tasks` attempts' calls, and the
    gateway's event-loop thread's own."""
    ready = [bench.attempt(name) for _ in range(tasks)]
    loop_clock = time.pthread_getcpuclockid(bench.gateways[name]._thread.ident)
    with configuration(name):
        c0 = bench.commits
        p0, t0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
        e0 = time.clock_gettime(loop_clock)
        requests = sum(calls() for calls in ready)
        e1 = time.clock_gettime(loop_clock)
        p1, t1, w1 = time.process_time(), time.thread_time(), time.perf_counter()
    return {"cpu_s": (p1 - p0) - (t1 - t0), "loop_s": e1 - e0, "wall_s": w1 - w0, "tasks": tasks,
            "calls": 3 * tasks, "requests": requests, "commits": bench.commits - c0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=150, help="attempts per configuration and round")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--dir", help="where the ledger and blobs live (default: a folder under $TMPDIR)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dome-gwcpu-bench-", dir=args.dir))
    bench = Bench(work)
    names = ("before", "per_call_tx", "sdk_path", "after")
    totals = {name: {"cpu_s": 0.0, "loop_s": 0.0, "wall_s": 0.0, "tasks": 0, "calls": 0, "requests": 0,
                     "commits": 0}
              for name in names}
    try:
        for name in names:
            measure(bench, name, 10)  # warm: imports, caches, first compiles
        for r in range(args.rounds):
            for name in (names if r % 2 == 0 else names[::-1]):
                got = measure(bench, name, args.tasks)
                for k in totals[name]:
                    totals[name][k] += got[k]
    finally:
        bench.close()
        shutil.rmtree(work, ignore_errors=True)
    res: dict[str, Any] = {}
    for name, t in totals.items():
        res[name] = {"cpu_ms_per_call": round(1000 * t["cpu_s"] / t["calls"], 3),
                     "cpu_ms_per_task": round(1000 * t["cpu_s"] / t["tasks"], 3),
                     "loop_ms_per_task": round(1000 * t["loop_s"] / t["tasks"], 3),
                     "calls_per_task": t["calls"] / t["tasks"], "requests_per_task": t["requests"] / t["tasks"],
                     "commits_per_task": t["commits"] / t["tasks"], "tasks": t["tasks"],
                     "wall_ms_per_task": round(1000 * t["wall_s"] / t["tasks"], 3)}
    res["ratio"] = round(res["after"]["cpu_ms_per_task"] / res["before"]["cpu_ms_per_task"], 3)
    res["one_tx_ratio"] = round(res["after"]["cpu_ms_per_task"] / res["per_call_tx"]["cpu_ms_per_task"], 3)
    res["direct_ratio"] = round(res["after"]["cpu_ms_per_task"] / res["sdk_path"]["cpu_ms_per_task"], 3)
    res["direct_loop_ratio"] = round(res["after"]["loop_ms_per_task"] / res["sdk_path"]["loop_ms_per_task"], 3)
    res["dir"] = str(work.parent)
    res["load"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(res))
    else:
        b, a = res["before"], res["after"]
        print(f"coordinator CPU per task (put_artifact, submit_patch, complete_task): before "
              f"{b['cpu_ms_per_task']} ms ({b['cpu_ms_per_call']} ms per call, {b['requests_per_task']:g} requests), "
              f"after {a['cpu_ms_per_task']} ms ({a['cpu_ms_per_call']} ms per call, {a['requests_per_task']:g} request); "
              f"after/before {res['ratio']} ({b['tasks']} tasks each, load {res['load']:.1f})")
        o = res["per_call_tx"]
        print(f"one durable transaction per request: {a['cpu_ms_per_task']} ms per task "
              f"({a['commits_per_task']:g} commits, {a['wall_ms_per_task']} ms wall) beside one per call "
              f"{o['cpu_ms_per_task']} ms ({o['commits_per_task']:g} commits, {o['wall_ms_per_task']} ms wall); "
              f"ratio {res['one_tx_ratio']} (ledger under {res['dir']})")
        d = res["sdk_path"]
        print(f"direct path: event-loop thread {a['loop_ms_per_task']} ms per task beside {d['loop_ms_per_task']} ms "
              f"through the SDK (ratio {res['direct_loop_ratio']}); coordinator {a['cpu_ms_per_task']} ms beside "
              f"{d['cpu_ms_per_task']} ms (ratio {res['direct_ratio']})")


if __name__ == "__main__":
    main()
