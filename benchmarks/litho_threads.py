"""ILT and forward-model time at 1 thread vs N threads, same process, same clip, interleaved.

    python benchmarks/litho_threads.py [--case 1] [--iterations 20] [--rounds 3] [--threads 2] [--json]

Each round runs the baseline (1 thread) and then the contender (--threads),
so load changes on a shared machine hit both alike; the figure is the ratio
of the medians. The FFT self-test is re-run at each thread count (the torch
CPU FFT bug depends on it), and the masks of both counts are evaluated so
the speed is not bought with a wrong answer. The load average before and
after is printed: on a machine shared with other busy processes more
threads can be slower than one.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=20, help="ILT iterations per run (spread over the 8 and 4 nm stages)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="the contender's thread count")
    ap.add_argument("--kernels", help="ICCAD 2013 data folder (default as in `dome litho`)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import torch

    from worker_sdk.litho import fftsafe
    from worker_sdk.litho.api import kernels_dir
    from worker_sdk.litho.engine import evaluate
    from worker_sdk.litho.forward import get_model
    from worker_sdk.litho.ilt import ILTConfig
    from worker_sdk.litho.iltbatch import optimize_mask
    from worker_sdk.litho.layout import load_layout, placement, rasterize

    data = kernels_dir({"kernels": args.kernels} if args.kernels else {})
    layout = load_layout(data / "layouts" / f"M1_test{args.case}.glp")
    target = rasterize(layout, "lithobench", 2048, placement(layout, "lithobench", 2048))
    m32 = get_model(data, 2048, dtype=torch.float32)
    m64 = get_model(data, 2048, dtype=torch.float64)
    cfg = ILTConfig().scaled(args.iterations)
    t_mask = torch.as_tensor(target, dtype=torch.float32)
    load_before = os.getloadavg()
    rows: dict[int, dict[str, list[float]]] = {1: {"ilt": [], "forward": []}, args.threads: {"ilt": [], "forward": []}}
    masks: dict[int, object] = {}
    for _ in range(args.rounds):
        for n in (1, args.threads):
            torch.set_num_threads(n)
            fftsafe.self_test(2048, "cpu", (torch.float32, torch.float64))
            t = time.perf_counter()
            m32.printed(t_mask)
            rows[n]["forward"].append(time.perf_counter() - t)
            t = time.perf_counter()
            res = optimize_mask(m32, target, cfg)
            rows[n]["ilt"].append(time.perf_counter() - t)
            masks[n] = res.mask
    load_after = os.getloadavg()
    torch.set_num_threads(1)
    quality = {}
    for n, mask in masks.items():
        ev = evaluate(m64, layout, mask=mask)
        quality[n] = {"l2_nm2": ev.l2, "pvb_nm2": ev.pvb}
    med = {n: {k: statistics.median(v) for k, v in r.items()} for n, r in rows.items()}
    out = {
        "case": args.case, "iterations": args.iterations, "rounds": args.rounds, "cpus": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)), "loadavg_before": load_before, "loadavg_after": load_after,
        "median_s": med, "ilt_ratio": med[args.threads]["ilt"] / med[1]["ilt"],
        "forward_ratio": med[args.threads]["forward"] / med[1]["forward"], "quality": quality,
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"case {args.case}, ILT {args.iterations} iterations, {args.rounds} rounds interleaved, "
          f"load average {load_before[0]:.1f} -> {load_after[0]:.1f} on {out['affinity']} CPUs")
    print(f"{'threads':>8} {'ILT s (median)':>15} {'forward 3 corners s':>20} {'L2':>8} {'PVB':>8}")
    for n in (1, args.threads):
        print(f"{n:>8} {med[n]['ilt']:>15.2f} {med[n]['forward']:>20.3f} {quality[n]['l2_nm2']:>8} {quality[n]['pvb_nm2']:>8}")
    print(f"{args.threads} threads / 1 thread: ILT {out['ilt_ratio']:.2f}x the time, forward {out['forward_ratio']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
