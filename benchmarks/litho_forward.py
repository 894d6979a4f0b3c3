"""Forward-model speed: band-limited SOCS vs the naive 24-FFT implementation, same process, same clip.

    python benchmarks/litho_forward.py [--case 1] [--repeat 3] [--batch 8] [--device cpu|cuda]

Prints, per 2048x2048 clip: one corner (nominal) and all three corners, for the
naive model (FFT2 of the mask, then 24 full-size inverse FFTs per corner,
complex64, kernels placed on the full spectrum once, batched 8 at a time) and for the engine (float32 and
float64), the speed-up, the accuracy of each against a float64 direct
reference (max |dI| and printed-pixel mismatches), and batched throughput.
On a GPU run it with --device cuda --batch 64 (see docs/litho.md).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def place_kernels(kernels, size, device, chunk=8):
    """The kernels on the full N x N spectrum, in chunks (done once, outside the timed region)."""
    import torch

    half = kernels.shape[-1] // 2
    idx = torch.arange(-half, half + 1, device=device) % size
    out = []
    for s in range(0, kernels.shape[0], chunk):
        hk = torch.zeros((min(chunk, kernels.shape[0] - s), size, size), dtype=torch.complex64, device=device)
        hk[:, idx[:, None], idx[None, :]] = kernels[s:s + chunk]
        out.append(hk)
    return out


def naive_intensity(mask, placed, weights, dose, size, device, chunk=8):
    """FFT2(d*M) . H_k on the full spectrum, one full-size inverse FFT per kernel, sum w_k |.|^2 (complex64)."""
    import torch

    spec = torch.fft.fft2((dose * mask).to(torch.complex64))
    out = torch.zeros((size, size), dtype=torch.float32, device=device)
    for i, hk in enumerate(placed):
        # batched (>= 2) inverse transforms: not affected by the torch CPU normalised-FFT bug
        field = torch.fft.ifft2(spec[None] * hk)
        w = weights[i * chunk:i * chunk + hk.shape[0]]
        out += (w[:, None, None] * (field.real ** 2 + field.imag ** 2)).sum(0)
    return out


def timed(fn, repeat, device):
    import torch

    times = []
    result = None
    for _ in range(repeat):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t = time.perf_counter()
        result = fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def main() -> int:
    import numpy as np
    import torch

    from worker_sdk.litho.api import kernels_dir
    from worker_sdk.litho.forward import CORNERS, CORNER_BY_NAME, SOCSModel
    from worker_sdk.litho.kernels import load_iccad13
    from worker_sdk.litho.layout import load_layout, rasterize

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    dev = args.device
    data = kernels_dir({})
    ks = load_iccad13(data)
    layout = load_layout(data / "layouts" / f"M1_test{args.case}.glp")
    target = rasterize(layout, "lithobench")
    n = target.shape[0]
    m32 = SOCSModel(ks, n, device=dev, dtype=torch.float32)
    m64 = SOCSModel(ks, n, device=dev, dtype=torch.float64)
    mask32 = torch.tensor(target, dtype=torch.float32, device=dev)
    mask64 = torch.tensor(target, dtype=torch.float64, device=dev)
    kt = {k: place_kernels(torch.tensor(v.kernels, device=dev), n, dev) for k, v in ks.items()}
    wt = {k: torch.tensor(v.weights, device=dev) for k, v in ks.items()}
    print(f"# forward model, test {args.case}, {n}x{n} clip, device={dev}, threads={torch.get_num_threads()}, "
          f"median of {args.repeat}")

    def naive(corners):
        return {c.name: naive_intensity(mask32, kt[c.kernel], wt[c.kernel], c.dose, n, dev) for c in corners}

    def fast(model, mask, corners):
        with torch.no_grad():
            return model.aerial(mask, corners)

    nominal = [CORNER_BY_NAME["nominal"]]
    t_naive1, _ = timed(lambda: naive(nominal), args.repeat, dev)
    t_naive3, i_naive = timed(lambda: naive(CORNERS), args.repeat, dev)
    t_f32_1, _ = timed(lambda: fast(m32, mask32, nominal), args.repeat, dev)
    t_f32_3, i_f32 = timed(lambda: fast(m32, mask32, CORNERS), args.repeat, dev)
    t_f64_1, _ = timed(lambda: fast(m64, mask64, nominal), args.repeat, dev)
    t_f64_3, i_f64 = timed(lambda: fast(m64, mask64, CORNERS), args.repeat, dev)

    # accuracy against the float64 direct reference (tests/litho/reference.py, complex128, 24 FFTs/corner)
    sys.path.insert(0, str(ROOT / "tests" / "litho"))
    import reference  # noqa: E402

    ref = reference.corners(target.astype(np.float64), ks)
    def acc(images):
        err = max(float(np.abs(images[c.name][0].double().cpu().numpy().reshape(n, n) - ref[c.name]).max()) for c in CORNERS)
        mism = sum(int(np.count_nonzero((images[c.name].reshape(n, n).cpu().numpy() >= 0.225) != (ref[c.name] >= 0.225)))
                   for c in CORNERS)
        return err, mism

    e_naive, p_naive = acc({k: v[None] for k, v in i_naive.items()})
    e32, p32 = acc(i_f32)
    e64, p64 = acc(i_f64)
    print(f"{'model':<28} {'1 corner ms':>12} {'3 corners ms':>13} {'x naive (1)':>12} {'x naive (3)':>12} "
          f"{'max|dI|':>10} {'print px off':>13}")
    rows = [("naive 24-FFT complex64", t_naive1, t_naive3, e_naive, p_naive),
            ("band-limited float32", t_f32_1, t_f32_3, e32, p32),
            ("band-limited float64", t_f64_1, t_f64_3, e64, p64)]
    for name, a, b, e, p in rows:
        print(f"{name:<28} {a * 1e3:>12.1f} {b * 1e3:>13.1f} {t_naive1 / a:>12.1f} {t_naive3 / b:>12.1f} "
              f"{e:>10.2e} {p:>13d}")
    # batched throughput (three corners, thresholded prints, float32)
    batch = torch.stack([mask32] * args.batch)
    t_b, _ = timed(lambda: m32.printed(batch), args.repeat, dev)
    print(f"batched float32, {args.batch} clips, 3 corners + resist: {t_b * 1e3:.1f} ms = "
          f"{args.batch / t_b:.1f} clips/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
