"""The gateway handlers' CPU per task, without HTTP: one tree, or two trees alternating.

    python benchmarks/gateway_handlers.py [--tasks 200] [--rounds 4]
    python benchmarks/gateway_handlers.py --compare OTHER_TREE [--tasks 200] [--rounds 6]

What a run's gateway does in its handlers' thread for one task's request, and nothing else:
the request's arguments as the JSON the worker's own client (worker_sdk.client.GatewayClient,
sender-bound grant, MAC call proofs) sends, `complete_task` carrying `put_artifact` and
`submit_patch`, handed to `WorkerGateway._invoke` as the MCP handler hands them (inside the
dispatcher's guard and the request's one durable transaction): for each call the argument
check, the grant and call-proof check, the charge, the tool, its events and its idempotency
record, in the SQLite ledger through the run's single writer. Requests are prepared (grant
issued, proposal built, proofs made) outside the timed window; the figure is this thread's
CPU (`time.thread_time`) per task.

`--compare` runs this script from both trees in child processes, alternating rounds (the
shared machine's load hits both alike), and prints each tree's figure and the ratio. Put the
ledger on tmpfs (TMPDIR=/dev/shm) for a figure without fsync cost.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(os.environ.get("DOME_BENCH_TREE") or Path(__file__).resolve().parent.parent)
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "benchmarks"))  # after the packages: benchmarks/registry.py is no package


class Handlers:
    """One gateway (not started: no socket, no HTTP) over a real ledger, writer and blob store."""

    def __init__(self, work: Path) -> None:
        from coordinator import runstate as rs
        from coordinator.gateway.dispatch import ToolDispatcher
        from coordinator.gateway.server import WorkerGateway
        from coordinator.gateway.worker_tools import GatewayBackend, build_tools
        from coordinator.grants import GrantVerifier
        from coordinator.keys import load_keyring, load_or_create_signing_key
        from coordinator.runloop.writer import LedgerWriter, WriterLedger
        from coordinator.runstate import RunState
        from gateway_cpu import make_repo
        from ledger import Ledger

        (work / "ops").mkdir()
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
        self.gateway = WorkerGateway(run_id=self.run, verifier=self.verifier,
                                     dispatcher=ToolDispatcher(build_tools(backend)),
                                     socket_path=work / "gw.sock", attempt=self.attempts.get)
        self.n = 0

    def request(self) -> tuple[str, str, dict[str, Any], str | None]:
        """A fresh attempt and its task's one request: (token, tool, arguments, proof)."""
        from coordinator import runstate as rs
        from coordinator.gateway import auth as grants_io
        from registry.canonical import digest_bytes
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
        if "issued" in inspect.signature(self.verifier.bind_call_key).parameters:
            self.verifier.bind_call_key(g.jti, wk, issued=g)  # as the run loop does (the token enters warm)
        else:  # a tree from before that
            self.verifier.bind_call_key(g.jti, wk)
        client = GatewayClient(token=g.token, profile=dict(g.payload), socket="/nonexistent", worker_key=wk)
        sent: list[tuple[str, dict[str, Any], str | None]] = []

        def capture(method: str, params: Any, *, notify: bool = False) -> Any:
            from registry.toolprofile import PROOF_HEADER  # noqa: F401 - the header the proof travels in
            for c in (params.get("arguments") or {}).get("carried") or ():
                c["proof"] = client._proof(c["tool"], c["arguments"])
            proof = client._proof(params["name"], params.get("arguments") or {})
            wire = json.loads(json.dumps(params))  # what the handler receives: the JSON the worker sent
            sent.append((wire["name"], wire.get("arguments") or {}, proof))
            return {"structuredContent": {"carried": [{"tool": "put_artifact"}, {"tool": "submit_patch"}]}}

        client._rpc = capture  # type: ignore[method-assign]
        (self.repo / "out").mkdir(exist_ok=True)
        (self.repo / "out" / f"i{self.n}.txt").write_text(f"{self.n}\n")
        spawn = {"base_ref": self.base, "base_tree_hash": self.tree, "run_id": self.run, "wave_id": "w1",
                 "node_id": node, "node_execution_id": neid, "action_spec": {"intent": "command"},
                 "determinism_seed": 1, "inputs_hash": "sha256:" + "0" * 64}
        staged: dict[str, bytes] = {}

        def keep(data: bytes) -> str:
            staged["diff"] = data
            return digest_bytes(data)
        proposal, _ = build_proposal(self.repo, spawn=spawn, profile=dict(g.payload), upload=keep)
        (self.repo / "out" / f"i{self.n}.txt").unlink()
        client.put_artifact_carried(staged["diff"], "text/x-diff", "patch.diff")
        pid = client.submit_patch_carried(proposal)
        client.complete_task("succeeded", summary={}, proposal_id=pid)
        assert len(sent) == 1, sent
        name, args, proof = sent[0]
        return g.token, name, args, proof

    def handle(self, token: str, name: str, args: dict[str, Any], proof: str | None) -> Callable[[], Any]:
        gw = self.gateway

        def run() -> Any:
            outcome = gw.dispatcher.guard(lambda: gw._invoke(token, name, dict(args), proof), tool=name)
            assert outcome.ok and len(outcome.result["carried"]) == 2, outcome.result
            return outcome
        return run

    def close(self) -> None:
        self.verifier.close()
        self.ledger.close()


def measure(h: Handlers, tasks: int) -> float:
    """CPU ms per task of this thread over `tasks` prepared requests."""
    ready = [h.handle(*h.request()) for _ in range(tasks)]
    t0 = time.thread_time()
    for run in ready:
        run()
    return 1000 * (time.thread_time() - t0) / tasks


def one_tree(tasks: int, rounds: int) -> list[float]:
    work = Path(tempfile.mkdtemp(prefix="dome-gwh-bench-"))
    h = Handlers(work)
    try:
        measure(h, 20)  # warm: imports, caches, first compiles
        return [round(measure(h, tasks), 4) for _ in range(rounds)]
    finally:
        h.close()
        shutil.rmtree(work, ignore_errors=True)


def compare(other: Path, tasks: int, rounds: int) -> dict[str, Any]:
    trees = {"this": REPO, "other": other.resolve()}
    got: dict[str, list[float]] = {k: [] for k in trees}
    for r in range(rounds):
        for name in (("this", "other") if r % 2 else ("other", "this")):
            env = {**os.environ, "DOME_BENCH_TREE": str(trees[name]), "PYTHONPATH": str(trees[name])}
            out = subprocess.run([sys.executable, __file__, "--tasks", str(tasks), "--rounds", "1", "--json"],
                                 env=env, check=True, capture_output=True, text=True).stdout
            got[name] += json.loads(out)["ms_per_task"]
    res = {k: {"tree": str(trees[k]), "ms_per_task": v, "median": round(statistics.median(v), 4)}
           for k, v in got.items()}
    res["ratio"] = round(res["this"]["median"] / res["other"]["median"], 3)
    res["load"] = os.getloadavg()[0]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=200, help="tasks per round")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--compare", type=Path, help="another tree (a checkout of this repository) to alternate with")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.compare is not None:
        res = compare(args.compare, args.tasks, args.rounds)
        if args.json:
            print(json.dumps(res))
            return
        for k in ("other", "this"):
            print(f"{k:5} {res[k]['tree']}: median {res[k]['median']} ms per task, rounds {res[k]['ms_per_task']}")
        print(f"this/other {res['ratio']} ({args.tasks} tasks per round, load {res['load']:.1f})")
        return
    rounds = one_tree(args.tasks, args.rounds)
    if args.json:
        print(json.dumps({"ms_per_task": rounds}))
    else:
        print(f"gateway handlers' CPU per task: median {statistics.median(rounds)} ms, rounds {rounds} "
              f"({args.tasks} tasks each, tree {REPO})")


if __name__ == "__main__":
    main()
