"""Batched ILT: B masks (tiles of one wave, or clips) optimised as one [B, N, N] tensor.

`optimize_masks` is the one home of ILT's stage loop; `optimize_mask`
runs it on a stack of one. A stack shares one parameter tensor [B, Ns, Ns],
one mask spectrum, one synthesis per kernel set and one backward pass per
iteration. The loss is the sum of the per-mask losses, so each mask's
gradient is exactly the gradient of its own loss (the masks do not
interact), and Adam's update is elementwise: on CPU in float64 every mask of
a stack comes out bit-identical to the same target optimised alone
(tests/litho/test_iltbatch.py). The CUDA path is this code with the model on
`device: cuda`.

`ilt_masks_per_batch` sizes a batch to a memory budget with the evaluation's
estimate (`engine.bytes_per_clip`) times `ILT_MEMORY_FACTOR`: the autograd
graph keeps the forward intermediates of every corner for the backward pass,
and the parameters carry their gradient and Adam's two moments.
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from worker_sdk.cancel import NEVER, CancellationToken

from .engine import bytes_per_clip, default_memory_budget
from .forward import CORNERS, Corner, SOCSModel, sigmoid_resist
from .ilt import ILTConfig, ILTResult, bridge_gaps, cleanup, setup_determinism

ILT_MEMORY_FACTOR = 4


def ilt_masks_per_batch(model: SOCSModel, memory_bytes: int | None = None, window=None) -> int:
    """How many masks one batched ILT call holds within `memory_bytes` (default: the evaluation's
    budget, half the free device memory on CUDA, 1 GiB on CPU); at least one."""
    from .process import DEFAULT

    budget = default_memory_budget(model) if memory_bytes is None else int(memory_bytes)
    return max(1, budget // (ILT_MEMORY_FACTOR * bytes_per_clip(model, window or DEFAULT)))


def _pool(x: torch.Tensor, s: int) -> torch.Tensor:
    """[B, N, N] -> [B, N/s, N/s]: the mean of each s x s block."""
    if s == 1:
        return x
    return F.avg_pool2d(x[:, None], s)[:, 0]


def _stack(arrays: Sequence[np.ndarray | None] | None, b: int, dt, dev) -> torch.Tensor | None:
    if arrays is None:
        return None
    if len(arrays) != b:
        raise ValueError(f"expected {b} arrays, got {len(arrays)}")
    return torch.as_tensor(np.stack([np.asarray(a) for a in arrays]), dtype=dt, device=dev)


def optimize_mask(model: SOCSModel, target: np.ndarray, config: ILTConfig = ILTConfig(), *,
                  token: CancellationToken = NEVER, progress: Callable[[int, int, float], None] | None = None,
                  init: np.ndarray | None = None, corners: Sequence[Corner] = CORNERS,
                  free: np.ndarray | None = None, fixed: np.ndarray | None = None,
                  weight: np.ndarray | None = None, clean: bool = True) -> ILTResult:
    """Optimise a mask for `target` (uint8 [N, N]) and return the cleaned binary mask.

    A tile of a larger layout passes `free` (bool [N, N], the pixels optimised, aligned to the
    coarsest stage), `fixed` (the mask elsewhere: neighbours' finished cores or the target) and
    `weight` (where the print counts in the loss); `clean=False` returns the raw binary mask.

    corners: the process window; the nominal corner has weight 1, the others `pvb_weight`, and
    the band term is the squared spread (max - min) of the other corners' soft prints (for the
    ICCAD pair: (Z_max - Z_min)^2)."""
    # the one stage loop, run here on a stack of one
    def one(a: np.ndarray | None) -> list[np.ndarray] | None:
        return None if a is None else [a]

    return optimize_masks(model, [target], config, token=token, progress=progress, inits=one(init),
                          corners=corners, frees=one(free), fixeds=one(fixed), weights=one(weight),
                          clean=clean)[0]


def optimize_masks(model: SOCSModel, targets: Sequence[np.ndarray], config: ILTConfig = ILTConfig(), *,
                   token: CancellationToken = NEVER,
                   progress: Callable[[int, int, float], None] | None = None,
                   inits: Sequence[np.ndarray] | None = None, corners: Sequence[Corner] = CORNERS,
                   frees: Sequence[np.ndarray] | None = None, fixeds: Sequence[np.ndarray] | None = None,
                   weights: Sequence[np.ndarray] | None = None, clean: bool = True) -> list[ILTResult]:
    """`optimize_mask` for each target, run as one [B, N, N] stack. `frees`, `fixeds`,
    `weights` and `inits` are per target (all given or none). Returns one ILTResult per target
    (its own loss history; `seconds` is the batch's wall time)."""
    b = len(targets)
    if b == 0:
        return []
    setup_determinism(config.seed)
    n = model.size
    dev, dt = model.device, model.dtype
    tgt = _stack(targets, b, dt, dev)
    start = _stack(inits, b, dt, dev) if inits is not None else tgt
    free = _stack(frees, b, dt, dev)
    fixed = _stack(fixeds, b, dt, dev)
    weight = _stack(weights, b, dt, dev)
    gaps = (_stack([bridge_gaps(np.asarray(t), config.bridge_gap_nm) for t in targets], b, dt, dev)
            if config.bridge_weight else None)
    total = sum(s.iterations for s in config.stages)
    done = 0
    history: list[list[float]] = [[] for _ in range(b)]
    t0 = time.perf_counter()
    theta: torch.Tensor | None = None
    prev_scale = None
    for stage in config.stages:
        s = stage.scale
        if n % s:
            raise ValueError(f"stage scale {s} does not divide the canvas {n}")
        token.check()
        if theta is None:
            theta = (2.0 * _pool(start, s) - 1.0) * 1.0
            if config.init_noise:  # each mask draws what optimize_mask would draw for it alone
                noise = [torch.randn(theta.shape[1:], generator=torch.Generator().manual_seed(config.seed), dtype=dt)
                         for _ in range(b)]
                theta = theta + config.init_noise * torch.stack(noise).to(dev)
        else:
            f = prev_scale // s
            theta = theta.repeat_interleave(f, 1).repeat_interleave(f, 2)
        theta = theta.detach().clone().requires_grad_(True)
        prev_scale = s
        t_s = _pool(tgt, s)
        out = n // s
        off = (s - 1) / 2.0
        opt = torch.optim.Adam([theta], lr=stage.lr)
        area = float(s * s)
        free_s = _pool(free, s) if free is not None else None
        fixed_s = _pool(fixed * (1 - free), s) if free is not None and fixed is not None else None
        w_s = _pool(weight, s) if weight is not None else None
        g_s = _pool(gaps, s) if gaps is not None else None
        for _ in range(stage.iterations):
            token.check()
            opt.zero_grad(set_to_none=True)
            mask = torch.sigmoid(config.mask_steepness * theta)
            if free_s is not None:
                mask = free_s * mask + (fixed_s if fixed_s is not None else 0.0)
            spec = model.mask_spectrum(mask)
            per = torch.zeros((b,), dtype=dt, device=dev)
            base: dict[str, torch.Tensor] = {}
            zs: dict[str, torch.Tensor] = {}
            for corner in corners:
                if corner.kernel not in base:
                    base[corner.kernel] = model.synthesize(model.intensity_coeffs(spec, corner.kernel), out, off)
                z = sigmoid_resist(base[corner.kernel] * corner.dose ** 2)
                zs[corner.name] = z
                wgt = 1.0 if corner.name == "nominal" else config.pvb_weight
                err = (z - t_s) ** 2
                if g_s is not None:
                    err = err + config.bridge_weight * g_s * z ** 2
                per = per + wgt * (err * w_s if w_s is not None else err).sum((-2, -1)) * area
            if config.band_weight:
                others = [z for name, z in zs.items() if name != "nominal"]
                if len(others) == 2:
                    spread = others[0] - others[1]
                else:
                    spread = torch.stack(others).amax(0) - torch.stack(others).amin(0)
                band = spread ** 2
                per = per + config.band_weight * (band * w_s if w_s is not None else band).sum((-2, -1)) * area
            token.check()
            per.sum().backward()
            opt.step()
            done += 1
            losses = per.detach().cpu().tolist()
            for k in range(b):
                history[k].append(float(losses[k]))
            if progress is not None:
                progress(done, total, float(sum(losses)))
    assert theta is not None
    with torch.no_grad():
        binary = (theta.detach() > 0).to(torch.uint8)
        if prev_scale > 1:
            binary = binary.repeat_interleave(prev_scale, 1).repeat_interleave(prev_scale, 2)
    raws = binary.cpu().numpy()
    secs = time.perf_counter() - t0
    return [ILTResult(cleanup(r, config.min_feature_nm, config.min_area_nm2) if clean else r, history[k], done, secs)
            for k, r in enumerate(raws)]
