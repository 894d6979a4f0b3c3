"""The fullchip example through `dome run`, phase by phase: the quick crop or the whole 462-tile block.

    python benchmarks/fullchip_block.py [--layout block_quick|block] [--clean serial,waves,seams,fused]
                                        [--iterations N] [--timeout S] [--json PATH]

Each `--clean` variant is one whole `dome run` of the same layout (tiles in
parity waves, clean-up, stitch, seam check, full-layout evaluation,
re-simulation, promotion), one after the other in the same invocation, so
their ratio survives the machine's load:

- `serial`: the stitch task cleans every tile, then assembles (the queue
  before the clean-up moved into the waves);
- `waves`: each tile is cleaned by its own batch or a clean-up task in the
  waves, and the stitch task assembles and runs the seam check;
- `seams`: as `waves`, and the seam windows are re-simulated by seam tasks in
  the waves; the stitch task only compares their records;
- `fused`: as `seams`, and the seam tasks also evaluate each tile on its own
  window of the clean mask; the stitch and the evaluation task sum those
  records instead of simulating the mask again (the `litho.resim` validation
  still re-simulates it, as the independent check).

Per variant it prints the run's wall time, CPU (from `run.finished`), the
tasks' walls grouped by kind (tile batches, clean-up tasks, stitch,
evaluation), the worker-side seconds per tile of each phase, each kind's
peak RSS, tiles per second, and the stitch task's wall: the serial part.
The run's folder is removed afterwards unless --keep.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _make_repo_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("fullchip_make_repo", ROOT / "examples" / "fullchip" / "make_repo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def queue_for(layout: str, clean: str, repo: Path, iterations: int | None, batch: int | None = None) -> dict:
    """The example's queue for `layout` (as make_repo writes it), with the clean-up serial or in the waves."""
    from worker_sdk.litho.tiledjob import prepare
    from worker_sdk.litho.tilequeue import tile_queue

    mr = _make_repo_module()
    fname = "work.quick.json" if layout == "block_quick" else "work.queue.json"
    _, iters, per_task, target, level, dups = mr.VARIANTS[fname]
    iters = iterations or iters
    batch = batch or per_task
    req = mr.request(layout, iters)
    plan = prepare(mr._in(repo, req))  # the folder exists already: this only plans
    q = tile_queue(plan, layout=req["layout"], out=req["out"], tile_dir=req["tiling"]["dir"], kernels=mr.KERNELS,
                   name=f"fullchip-{layout}-{clean}", batch_size=batch, iterations=iters, mrc=mr.MRC,
                   promote_to=target, evaluate_level=level, endgame_max_duplicates=dups,
                   clean_in_waves=(clean in ("waves", "seams", "fused")), seams_in_waves=(clean in ("seams", "fused")),
                   evaluate_in_waves=(clean == "fused"),
                   validations=[mr.TESTS_SUITE])
    q["repo"] = str(repo)
    return q


def _ts(e: dict) -> float:
    return datetime.fromisoformat(e["ts"].replace("Z", "+00:00")).timestamp()


def phases(events: list[dict], report: dict) -> dict:
    """Pure: the run's figures from its events and the stitch task's committed report."""
    start: dict[str, float] = {}
    walls: dict[str, list[float]] = {}
    worker: dict[str, float] = {}
    rss: dict[str, float] = {}
    tiles_run = 0
    for e in events:
        node = e.get("node_id") or ""
        kind = node.split("-")[0] if node.startswith(("tiles-", "clean-", "seams-")) else node
        if e["topic"] == "task.dispatched":
            start[e["payload"].get("node_execution_id") or node] = _ts(e)
        elif e["topic"] == "task.completed":
            t0 = start.get(e.get("node_execution_id") or e["payload"].get("node_execution_id") or node)
            if t0 is not None:
                walls.setdefault(kind, []).append(_ts(e) - t0)
            summary = e["payload"].get("summary") or {}
            for k, v in (summary.get("seconds") or {}).items():
                worker[k] = worker.get(k, 0.0) + float(v)
            if summary.get("peak_rss_mb"):
                rss[kind] = max(rss.get(kind, 0.0), float(summary["peak_rss_mb"]))
            tiles_run += len(summary.get("tiles_run") or [])
    tiling = report.get("tiling") or {}
    for k, v in (tiling.get("seconds") or {}).items():
        worker[f"stitch.{k}"] = float(v)
    if tiling.get("peak_rss_mb"):
        rss["stitch"] = float(tiling["peak_rss_mb"])
    finished = next((e for e in reversed(events) if e["topic"] == "run.finished"), None)
    wall = _ts(events[-1]) - _ts(events[0]) if events else 0.0
    last_task = max((_ts(e) for e in events if e["topic"] == "task.completed"), default=None)
    # after the last task: integration, the validations (litho.resim re-simulates the mask), promotion
    finish = round(_ts(finished) - last_task, 1) if finished is not None and last_task is not None else None
    return {"wall_s": round(wall, 1), "tiles": tiles_run, "finish_s": finish,
            "tiles_per_s": round(tiles_run / wall, 4) if wall else None,
            "tasks": {k: {"n": len(v), "wall_s": round(sum(v), 1), "max_s": round(max(v), 1)} for k, v in walls.items()},
            "worker_s": {k: round(v, 1) for k, v in sorted(worker.items())},
            "peak_rss_mb": rss, "status": (finished or {}).get("payload", {}).get("status"),
            "cost": (finished or {}).get("payload", {}).get("cost")}


def run_variant(layout: str, clean: str, work: Path, data: Path, iterations: int | None, timeout: float) -> dict:
    mr = _make_repo_module()
    fname = "work.quick.json" if layout == "block_quick" else "work.queue.json"
    base = work / clean
    repo = mr.make_repo(base / "repo", data, variants=(fname,)) if iterations is None else _repo_iters(
        mr, base / "repo", data, layout, iterations)
    q = queue_for(layout, clean, repo, iterations)
    qfile = base / "queue.json"
    qfile.write_text(json.dumps(q))
    ops = base / "ops"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "coordinator.cli.main", "run", str(qfile), "--ops-root", str(ops), "--json"],
                       env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    out = json.loads(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else {}
    ev = subprocess.run([sys.executable, "-m", "coordinator.cli.main", "events", out.get("run_id", "?"), "--ops-root",
                         str(ops), "--json"], env=env, capture_output=True, text=True, timeout=300)
    events = [json.loads(x) for x in ev.stdout.splitlines() if x.strip()]
    ref = q["promote_to"]
    show = subprocess.run(["git", "show", f"{ref}:masks/{layout}.litho.json"], cwd=repo, capture_output=True, text=True,
                          timeout=60)
    report = json.loads(show.stdout) if show.returncode == 0 else {}
    res = {"layout": layout, "clean": clean, "status": out.get("status"), "cli_wall_s": round(wall, 1),
           **phases(events, report), "seam_check": (report.get("tiling") or {}).get("seam_check"),
           "metrics": report.get("metrics"), "evaluate": _evaluate_report(repo, ref, layout)}
    if not report:  # promoted without the stitched mask: a partial run, not a result
        res["status"] = f"{out.get('status')} without masks/{layout}.litho.json"
    if res["status"] != "promoted":
        res["stderr_tail"] = r.stderr[-2000:]
    return res


def _evaluate_report(repo: Path, ref: str, layout: str) -> dict:
    """The evaluation task's figures on the promoted branch: metrics, violation count, how many
    tiles it summed from the waves' records."""
    show = subprocess.run(["git", "show", f"{ref}:masks/{layout}.evaluate.json"], cwd=repo, capture_output=True,
                          text=True, timeout=60)
    if show.returncode != 0:
        return {}
    doc = json.loads(show.stdout)
    return {"l2_nm2": doc["metrics"]["l2_nm2"], "pvb_nm2": doc["metrics"]["pvb_nm2"],
            "epe_violations": doc["metrics"]["epe_violations"], "violation_count": doc.get("violation_count"),
            "violation_groups": len({v["violation_group_id"] for v in doc.get("violations", [])}),
            "tiles_evaluated_in_waves": doc.get("provenance", {}).get("tiles_evaluated_in_waves")}


def _repo_iters(mr, out: Path, data: Path, layout: str, iterations: int) -> Path:
    """make_repo with another ILT iteration count pinned in the tile plan."""
    fname = "work.quick.json" if layout == "block_quick" else "work.queue.json"
    saved = mr.VARIANTS[fname]
    mr.VARIANTS[fname] = (saved[0], iterations, *saved[2:])
    try:
        return mr.make_repo(out, data, variants=(fname,))
    finally:
        mr.VARIANTS[fname] = saved


def _line(r: dict) -> str:
    tasks = " ".join(f"{k} {v['n']}x {v['wall_s']}s (max {v['max_s']})" for k, v in sorted(r["tasks"].items()))
    cost = r.get("cost") or {}
    cpu = cost.get("total_cpu_s") or cost.get("cpu_s") or cost
    return (f"{r['layout']} clean={r['clean']}: {r['status']} wall {r['wall_s']} s (after the last task "
            f"{r.get('finish_s')} s), {r['tiles']} tiles, "
            f"{r['tiles_per_s']} tiles/s; tasks: {tasks}; worker s: {r['worker_s']}; peak RSS MiB {r['peak_rss_mb']}; "
            f"cost {json.dumps(cpu)}")


def main(argv: list[str] | None = None) -> int:
    from registry.datasets import iccad13_data

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layout", choices=["block_quick", "block"], default="block_quick")
    ap.add_argument("--clean", default="seams,fused",
                    help="comma list of serial, waves, seams, fused (run in this order)")
    ap.add_argument("--iterations", type=int, default=None, help="ILT iterations per tile (default: the example's)")
    ap.add_argument("--timeout", type=float, default=6 * 3600, help="seconds per run")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--keep", type=Path, default=None, help="keep the runs' folders here")
    args = ap.parse_args(argv)
    data = iccad13_data() or ROOT / "examples" / "iccad13" / "data"
    variants = [v.strip() for v in args.clean.split(",") if v.strip()]
    bad = [v for v in variants if v not in ("serial", "waves", "seams", "fused")]
    if bad:
        ap.error(f"unknown --clean variant(s): {bad}")
    work = Path(tempfile.mkdtemp(prefix="fullchip-bench-")) if args.keep is None else args.keep
    results = []
    try:
        for v in variants:
            r = run_variant(args.layout, v, work, data, args.iterations, args.timeout)
            print(_line(r), flush=True)
            results.append(r)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps({"load": os.getloadavg(), "results": results}, indent=1) + "\n")
    return 0 if all(r["status"] == "promoted" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
