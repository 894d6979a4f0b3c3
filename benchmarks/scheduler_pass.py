"""One scheduler pass at 1,000 and 10,000 ready nodes: the incremental ready set
(coordinator.ready_set) beside the full re-score (scheduler.statuses + decide).

    python benchmarks/scheduler_pass.py [--sizes 1000,10000] [--passes 200] [--json]

The run: N independent one-file tasks, max_parallel 16, all slots busy. Each pass
is what the run loop does after an attempt ends: one task.completed, then a
decision for the freed slot, which is dispatched. Both sides see the same
states; the fold of the events (runstate.apply) is outside both timings. Each
incremental decision is checked byte-identical to the full one.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coordinator import runstate as rs  # noqa: E402
from coordinator.ready_set import ReadySet  # noqa: E402
from coordinator.scheduler import SchedulerPolicy, decide, statuses  # noqa: E402
from coordinator.workqueue import parse_work_queue  # noqa: E402
from registry.canonical import canonical_json  # noqa: E402

SLOTS = 16


def _graph(n: int):
    tasks = [{"node_id": f"t{i:05d}", "dependencies": [], "containers": [], "required_capabilities": ["write"],
              "required_outputs": ["patch_proposal"], "action_spec": {"intent": "command", "argv": ["true"]}}
             for i in range(n)]
    return parse_work_queue({"artifact_kind": "dome.work.queue/v1", "repo": ".", "base_ref": "main",
                             "determinism_seed": 1, "policy": "default", "promote_to": "refs/heads/out",
                             "tasks": tasks}).graph


def measure(n: int, passes: int) -> dict:
    g = _graph(n)
    pol = SchedulerPolicy(max_parallel=SLOTS)
    seq = 0
    state = rs.fold([])
    ready = ReadySet(g, state)
    running: list[tuple[str, str]] = []

    def add(ev: dict) -> None:
        nonlocal state, seq
        seq += 1
        ev["sequence"] = seq
        state = rs.apply(state, ev)
        ready.note(ev, state)

    def dispatch(d: dict) -> None:
        for e in d["selected"]:
            neid = f"e{seq}-{e['node_id']}"
            add({"topic": rs.TASK_DISPATCHED, "node_id": e["node_id"], "payload": {"node_execution_id": neid}})
            running.append((e["node_id"], neid))

    first = decide(g, state, pol, 1, 1)
    add({"topic": rs.SCHEDULING_DECISION, "node_id": None, "payload": {}})
    dispatch(first)
    full_t, inc_t = [], []
    pn = time.perf_counter_ns
    gc.disable()
    try:
        for w in range(2, passes + 2):
            nid, neid = running.pop(0)
            add({"topic": rs.TASK_COMPLETED, "node_id": nid, "payload": {"node_execution_id": neid,
                                                                         "outcome": "succeeded"}})
            t0 = pn()
            full = decide(g, state, pol, 1, w, status=statuses(g, state))
            t1 = pn()
            inc = ready.decide(state, pol, 1, w)
            t2 = pn()
            full_t.append(t1 - t0)
            inc_t.append(t2 - t1)
            assert canonical_json(inc) == canonical_json(full)
            add({"topic": rs.SCHEDULING_DECISION, "node_id": None, "payload": {}})
            dispatch(full)
    finally:
        gc.enable()
    f, i = statistics.median(full_t) / 1e3, statistics.median(inc_t) / 1e3
    return {"ready_nodes": ready.counts.get("ready", 0), "nodes": n, "passes": passes,
            "full_rescore_us": round(f, 1), "ready_set_us": round(i, 1), "speedup": round(f / i, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--passes", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    rows = [measure(int(n), a.passes) for n in a.sizes.split(",")]
    if a.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'nodes':>7} {'ready':>7} {'full re-score':>14} {'ready set':>10} {'speedup':>8}  (median per pass)")
        for r in rows:
            print(f"{r['nodes']:>7} {r['ready_nodes']:>7} {r['full_rescore_us']:>11.1f} us {r['ready_set_us']:>7.1f} us "
                  f"{r['speedup']:>7.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
