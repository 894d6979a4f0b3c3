"""Streaming (tile-by-tile) evaluation against the whole-canvas tiled evaluation: tiles/s and peak RSS.

    python benchmarks/litho_tiled.py [--sizes 4096 8192] [--threads 1] [--device cpu|cuda]

Layouts: square crops of examples/fullchip/layouts/block.oas (IHP SG13G2
Metal1 scaled to the ICCAD 2013 node), evaluated without OPC (the mask is the
target). Each measurement runs in a fresh process so its peak RSS
(ru_maxrss) is its own; both modes run in the same invocation, one after the
other, so their ratio survives machine load. The metrics of both must agree.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BLOCK = ROOT / "examples" / "fullchip" / "layouts" / "block.oas"


def crop(size: int):
    import klayout.db as kdb

    from worker_sdk.litho.layout import Layout

    ly = kdb.Layout()
    ly.read(str(BLOCK))
    region = kdb.Region(ly.top_cell().begin_shapes_rec(ly.find_layer(1, 0))) & kdb.Region(kdb.Box(0, 0, size, size))
    polys = []
    for p in region.each():
        for q in kdb.Region(p).decompose_trapezoids():  # hole-free pieces
            polys.append(tuple((pt.x, pt.y) for pt in q.each_point_hull()))
    return Layout(tuple(polys), f"block crop {size} nm", "1/0")


def child(mode: str, size: int, threads: int, device: str = "cpu") -> dict:
    import resource

    import torch

    from registry.datasets import iccad13_data
    from worker_sdk.litho.engine import evaluate
    from worker_sdk.litho.forward import get_model
    from worker_sdk.litho.streaming import evaluate_streaming

    torch.set_num_threads(threads)
    model = get_model(iccad13_data(), 2048, device=device)
    layout = crop(size)
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    if mode == "whole":
        ev = evaluate(model, layout, tile=True)
    else:
        ev = evaluate_streaming(model, layout)
    secs = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"mode": mode, "size_nm": size, "tiles": len(ev.tiles), "seconds": round(secs, 2),
            "tiles_per_s": round(len(ev.tiles) / secs, 3), "peak_rss_mb": round(rss), "rss_before_mb": round(base_rss),
            "canvas_px": list(ev.canvas), "l2": ev.l2, "pvb": ev.pvb, "epe": ev.epe,
            "topology_defects": ev.topology_defects}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "SIZE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.threads, args.device)))
        return 0
    rows = []
    for size in args.sizes:
        pair = {}
        for mode in ("whole", "streaming"):
            r = subprocess.run([sys.executable, __file__, "--child", mode, str(size), "--threads", str(args.threads),
                                "--device", args.device],
                               capture_output=True, text=True, check=True)
            pair[mode] = json.loads(r.stdout.strip().splitlines()[-1])
            print(json.dumps(pair[mode]), file=sys.stderr, flush=True)  # each as it ends: a cut-off run keeps them
        keys = ("l2", "pvb", "epe", "topology_defects")
        same = all(pair["whole"][k] == pair["streaming"][k] for k in keys)
        rows.append((size, pair, same))
    print(f"{'layout':>10} {'tiles':>5} | {'whole tiles/s':>13} {'whole RSS MiB':>13} | "
          f"{'stream tiles/s':>14} {'stream RSS MiB':>14} | metrics equal")
    for size, p, same in rows:
        w, s = p["whole"], p["streaming"]
        print(f"{size / 1000:>7.1f} um {w['tiles']:>5} | {w['tiles_per_s']:>13.3f} {w['peak_rss_mb']:>13} | "
              f"{s['tiles_per_s']:>14.3f} {s['peak_rss_mb']:>14} | {same}")
    print(json.dumps([{"size_nm": size, **{m: p[m] for m in p}, "metrics_equal": same} for size, p, same in rows]))
    return 0 if all(same for _, _, same in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
