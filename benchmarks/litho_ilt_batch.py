"""Batched ILT ([B, N, N], iltbatch.optimize_masks) beside one clip at a time (ilt.optimize_mask), same process.

    python benchmarks/litho_ilt_batch.py [--batch 4] [--iterations 20] [--repeat 2] [--threads 1]
                                         [--device cpu|cuda] [--dtype float32|float64]

B ICCAD 2013 clips (1..B) are optimised with the default schedule scaled to
`--iterations`, interleaved: one at a time (baseline), then as one batch, per
repeat. Prints seconds per clip for both, the ratio, the batch size the
memory budget would pick on this device, and whether every batched mask is
bit-identical to its one-at-a-time mask. On a GPU: --device cuda --batch 16.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    args = ap.parse_args(argv)
    import numpy as np
    import torch

    from registry.datasets import iccad13_data
    from worker_sdk.litho.forward import get_model
    from worker_sdk.litho.ilt import ILTConfig
    from worker_sdk.litho.iltbatch import optimize_mask
    from worker_sdk.litho.iltbatch import ilt_masks_per_batch, optimize_masks
    from worker_sdk.litho.layout import load_layout, rasterize

    torch.set_num_threads(args.threads)
    data = iccad13_data() or ROOT / "examples" / "iccad13" / "data"
    model = get_model(data, 2048, device=args.device, dtype=getattr(torch, args.dtype))
    targets = [rasterize(load_layout(data / "layouts" / f"M1_test{1 + k % 10}.glp"), "lithobench")
               for k in range(args.batch)]
    cfg = ILTConfig().scaled(args.iterations)

    def sync() -> None:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    one, many = [], []
    same = True
    diff_px: list[int] = []  # mask pixels that differ, batched against one at a time, per clip (last repeat)
    rerun_px: list[int] = []  # one at a time against its own first repeat: is the device deterministic?
    first: list = []
    for _ in range(args.repeat):
        sync()
        t0 = time.perf_counter()
        alone = [optimize_mask(model, t, cfg, clean=False).mask for t in targets]
        sync()
        one.append((time.perf_counter() - t0) / len(targets))
        t0 = time.perf_counter()
        both = [r.mask for r in optimize_masks(model, targets, cfg, clean=False)]
        sync()
        many.append((time.perf_counter() - t0) / len(targets))
        same = same and all(np.array_equal(a, b) for a, b in zip(alone, both))
        diff_px = [int(np.count_nonzero(np.asarray(a) != np.asarray(b))) for a, b in zip(alone, both)]
        first = first or alone
        rerun_px = [int(np.count_nonzero(np.asarray(a) != np.asarray(f))) for a, f in zip(alone, first)]
    a, b = statistics.median(one), statistics.median(many)
    print(f"device {args.device}, {args.dtype}, {args.threads} thread(s), {args.batch} clips, "
          f"{sum(s.iterations for s in cfg.stages)} iterations, {args.repeat} repeats (median)")
    print(f"one at a time (baseline): {a:.2f} s per clip")
    print(f"batched [B, N, N]:        {b:.2f} s per clip  ({a / b:.2f}x the baseline's speed)")
    print(f"memory budget picks {ilt_masks_per_batch(model)} clips per batch on this device")
    print(f"batched masks bit-identical to one at a time: {same}")
    if not same:  # how far apart, in mask pixels of 2048 x 2048, per clip
        print(f"mask pixels differing, batched vs one at a time (per clip): {diff_px}")
    print(f"mask pixels differing, one at a time, repeat vs first repeat (per clip): {rerun_px}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
