"""In-run integration benchmark: the integration tail after the last worker.

One work queue of N independent command tasks (each a few seconds of "work"
and its own file) and a validation suite that takes about a second, run twice
in the same process on fresh copies of the same repository:

- finish-only: every proposal is verified, stacked and validated after the
  last task has ended (the default);
- in-run: `scheduling.integrate_during_run` (batches of 2): proposals are
  stacked and validated while the other tasks still run.

Printed for each: wall time to `run.finished`, and the tail (from the last
`task.completed` to `run.finished`: what the person waits for after the
work is done). Both runs must end promoted on the same tree.
Usage: python benchmarks/canvas_in_run.py [--tasks 8] [--json]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def _queue(root: Path, n: int, in_run: bool) -> Path:
    repo = root / "repo"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("bench\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=b", "-c", "user.email=b@x", "commit", "-q", "-m", "init")
    tasks = [{"node_id": f"t{i}", "containers": [], "required_capabilities": ["write"],
              "required_outputs": ["patch_proposal"], "dependencies": [],
              "action_spec": {"intent": "command", "argv": ["sh", "-c", f"sleep {1 + i % 3}; echo {i} > f{i}.txt"]}}
             for i in range(n)]
    sched = {"max_parallel": 2, **({"integrate_during_run": True, "integration_batch_size": 2} if in_run else {})}
    q = {"artifact_kind": "dome.work.queue/v1", "repo": str(repo), "base_ref": "main", "determinism_seed": 3,
         "policy": "default", "promote_to": "refs/heads/dome/bench", "tasks": tasks, "scheduling": sched,
         "validations": [{"suite": "command", "name": "tests", "argv": ["sh", "-c", "sleep 1"]}]}
    path = root / "work.queue.json"
    path.write_text(json.dumps(q))
    return path


def _ts(e) -> float:
    return datetime.fromisoformat(str(e.ts).replace("Z", "+00:00")).timestamp()


def one(n: int, in_run: bool) -> dict:
    from coordinator.keys import load_keyring, load_or_create_signing_key
    from coordinator.runloop.finish import integration_finish
    from coordinator.runloop.loop import RunContext, RunLoop
    from ledger import Ledger

    with tempfile.TemporaryDirectory(prefix="dome-bench-canvas-") as tmp:
        root = Path(tmp)
        q = _queue(root, n, in_run)
        ops = root / "ops"
        ledger = Ledger.open(None, ops)
        try:
            ctx = RunContext(ledger=ledger, ops_root=ops, signer=load_or_create_signing_key(ops),
                             keyring=load_keyring(ops), finish=integration_finish, sandbox="none")
            t0 = time.perf_counter()
            out = RunLoop.start(q, ctx).run()
            wall = time.perf_counter() - t0
            ev = ledger.events(out.run_id)
        finally:
            ledger.close()
        assert out.status == "promoted", out
        last_done = max(_ts(e) for e in ev if e.topic == "task.completed")
        finished = max(_ts(e) for e in ev if e.topic == "run.finished")
        return {"mode": "in-run" if in_run else "finish-only", "wall_s": round(wall, 2),
                "tail_s": round(finished - last_done, 2),
                "tree": _git(root / "repo", "rev-parse", f"{out.head}^{{tree}}")}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    base = one(args.tasks, False)
    new = one(args.tasks, True)
    assert base["tree"] == new["tree"], "both modes must promote the same tree"
    if args.json:
        print(json.dumps({"finish_only": base, "in_run": new}))
        return 0
    for r in (base, new):
        print(f"{r['mode']:12s} wall {r['wall_s']:6.2f} s   tail after the last task {r['tail_s']:5.2f} s")
    print(f"tail ratio in-run / finish-only: {new['tail_s'] / max(base['tail_s'], 1e-9):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
