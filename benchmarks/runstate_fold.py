"""Cost of folding one event into the run state, as the run grows.

`python benchmarks/runstate_fold.py [--sizes 100,1000,10000]`: a run of N
nodes (each dispatched, completed, acked, with a proposal) is folded event by
event with `coordinator.runstate.apply`, the way the run loop keeps its state;
the baseline, measured in the same process, is the same fold done by copying
the per-node, per-execution, ended and proposal containers on every event (what
`apply` did before its containers became persistent). Figures are CPU time per
event over the last 1,000 events of the run (where the state is largest).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coordinator import runstate as rs  # noqa: E402


def events(n: int) -> list[SimpleNamespace]:
    out, seq = [], 0
    for i in range(n):
        node, neid = f"n{i:06d}", f"x{i:06d}"
        for topic, payload in ((rs.TASK_DISPATCHED, {"node_execution_id": neid, "attempt": 1}),
                               (rs.PATCH_SUBMITTED, {"node_execution_id": neid, "proposal_id": f"p{i}"}),
                               (rs.TASK_COMPLETED, {"node_execution_id": neid, "outcome": "succeeded"}),
                               (rs.TASK_ACK, {"node_execution_id": neid})):
            seq += 1
            out.append(SimpleNamespace(sequence=seq, run_id="r", topic=topic, node_id=node,
                                       node_execution_id=neid, payload=payload))
    return out


def copying_apply(state: rs.RunState, event) -> rs.RunState:
    """The baseline: the plain fold of one event, which copies every container of the
    state first (what `apply` did before its containers became persistent)."""
    return rs.fold((event,), state)


def per_event(apply, evs: list, tail: int = 1000) -> float:
    state = rs.RunState()
    head = evs[:-tail]
    state = rs.fold(head)
    if apply is rs.apply:  # the run loop's state is persistent from its first apply on
        state = rs.apply(state, SimpleNamespace(sequence=0, run_id="r", topic="x.none", node_id=None,
                                                node_execution_id=None, payload={}))
    t0 = time.process_time()
    for e in evs[-tail:]:
        state = apply(state, e)
    return (time.process_time() - t0) / tail


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100,1000,10000")
    a = ap.parse_args(argv)
    rows = []
    for n in (int(x) for x in a.sizes.split(",")):
        evs = events(n)
        tail = min(1000, len(evs) // 2)
        rows.append({"nodes": n, "events": len(evs),
                     "apply_us": round(1e6 * per_event(rs.apply, evs, tail), 2),
                     "copying_baseline_us": round(1e6 * per_event(copying_apply, evs, tail), 2)})
        print(json.dumps(rows[-1]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
