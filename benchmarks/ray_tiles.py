"""Tile tasks of the fullchip quick crop over a Ray cluster of one node, then of two, in one run.

    python benchmarks/ray_tiles.py [--iterations 2] [--batch 1] [--nodes 1,2] [--json PATH]

Each node is another host in its own network and mount namespaces
(tests/runloop/ray_netns.py, as the cross-host test builds it): one CPU and
one tile slot per node, the head without the slot, so every tile task runs on
a node, fetching its base as a git bundle and reaching the gateway over TLS.
The queue is the quick crop's tile batches only (four parity waves; no
clean-up, stitch or evaluation), the same queue for both clusters; the run
must be promoted. Printed per cluster: tiles per second from the first
dispatch to the last tile task's completion, the tasks' mean wall, and the
run's wall. Needs root, Ray and bubblewrap. On one machine the nodes share its
cores: two nodes can at most use two of them.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import fullchip_block as fb  # noqa: E402

RESOURCE = "dome_tile_node"


def tile_queue_only(repo: Path, iterations: int, batch: int) -> dict:
    q = fb.queue_for("block_quick", "serial", repo, iterations, batch=batch)
    q["tasks"] = [t for t in q["tasks"] if t["node_id"].startswith("tiles-")]
    for t in q["tasks"]:
        t["action_spec"]["params"]["threads"] = 1
    tiles_dir = q["tasks"][0]["action_spec"]["params"]["tiling"]["dir"]
    n = sum(len(t["action_spec"]["params"]["tiling"]["tiles"]) for t in q["tasks"])
    q["validations"] = [{"suite": "command", "name": "tests", "required": True,
                         "argv": ["sh", "-c", f"test $(ls {tiles_dir}/raw/*.npy | wc -l) -eq {n}"]}]
    q["scheduling"] = {"max_parallel": 4, "endgame_max_duplicates": 0, "default_max_attempts": 2}
    q["promote_to"] = "refs/heads/tiles"
    return q


def tile_rate(events: list[dict]) -> dict:
    """Pure: tiles per second from the first dispatch to the last tile task's completion."""
    disp = [fb._ts(e) for e in events if e["topic"] == "task.dispatched"]
    done = [e for e in events if e["topic"] == "task.completed"]
    tiles = sum(len((e["payload"].get("summary") or {}).get("tiles_run") or []) for e in done)
    span = max(fb._ts(e) for e in done) - min(disp) if done and disp else 0.0
    ph = fb.phases(events, {})
    return {"tiles": tiles, "span_s": round(span, 1), "tiles_per_s": round(tiles / span, 4) if span else None,
            "task_mean_s": round(ph["tasks"]["tiles"]["wall_s"] / ph["tasks"]["tiles"]["n"], 1) if "tiles" in ph["tasks"] else None,
            "status": ph["status"]}


def run_on(nodes: int, work: Path, data: Path, iterations: int, batch: int, timeout: float) -> dict:
    from tests.runloop.ray_netns import ray_cluster

    mr = fb._make_repo_module()
    base = work / f"nodes{nodes}"
    repo = fb._repo_iters(mr, base / "repo", data, "block_quick", iterations)
    q = tile_queue_only(repo, iterations, batch)
    qfile = base / "queue.json"
    qfile.write_text(json.dumps(q))
    ops = base / "ops"
    with ray_cluster(RESOURCE, nodes=nodes, node_cpus=1, node_slots=1) as c:
        env = {**c["env"], "PYTHONPATH": str(ROOT), "DOME_RAY_RESOURCES": json.dumps({RESOURCE: 1})}
        r = subprocess.run([sys.executable, "-m", "coordinator.cli.main", "run", str(qfile), "--ops-root", str(ops),
                            "--executor", "ray", "--gateway-bind", c["head_ip"], "--json"], env=env,
                           capture_output=True, text=True, timeout=timeout)
    out = json.loads(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else {}
    ev = subprocess.run([sys.executable, "-m", "coordinator.cli.main", "events", out.get("run_id", "?"), "--ops-root",
                         str(ops), "--json"], env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                        text=True, timeout=300)
    events = [json.loads(x) for x in ev.stdout.splitlines() if x.strip()]
    res = {"nodes": nodes, "run_status": out.get("status"), **tile_rate(events)}
    executors = {e["payload"].get("executor") for e in events if e["topic"] == "task.dispatched"}
    res["executors"] = sorted(x for x in executors if x)
    if out.get("status") != "promoted":
        res["stderr_tail"] = r.stderr[-3000:] + r.stdout[-1000:]
    return res


def main(argv: list[str] | None = None) -> int:
    from registry.datasets import iccad13_data
    from tests.runloop.ray_netns import can_run

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1, help="tiles per task")
    ap.add_argument("--nodes", default="1,2")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    why = can_run()
    if why:
        print(f"ray_tiles: cannot build the cluster here: {why}", file=sys.stderr)
        return 2
    data = iccad13_data() or ROOT / "examples" / "iccad13" / "data"
    work = Path(tempfile.mkdtemp(prefix="ray-tiles-"))
    results = []
    try:
        for n in [int(x) for x in args.nodes.split(",")]:
            r = run_on(n, work, data, args.iterations, args.batch, args.timeout)
            print(f"{n} node(s): {r['run_status']}, {r['tiles']} tiles in {r['span_s']} s = {r['tiles_per_s']} tiles/s, "
                  f"mean task wall {r['task_mean_s']} s, executors {r['executors']}", flush=True)
            if r.get("stderr_tail"):
                print(r["stderr_tail"], file=sys.stderr)
            results.append(r)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if len(results) == 2 and results[0]["tiles_per_s"] and results[1]["tiles_per_s"]:
        print(f"two nodes / one node: {results[1]['tiles_per_s'] / results[0]['tiles_per_s']:.2f} x")
    if args.json:
        args.json.write_text(json.dumps({"load": os.getloadavg(), "results": results}, indent=1) + "\n")
    return 0 if all(r["run_status"] == "promoted" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
