"""Batched ILT ([B, N, N]): each mask equals optimize_mask on its target alone, free/fixed/weight included."""
from __future__ import annotations

import numpy as np

from worker_sdk.litho.ilt import ILTConfig, Stage
from worker_sdk.litho.iltbatch import optimize_mask
from worker_sdk.litho.iltbatch import ILT_MEMORY_FACTOR, ilt_masks_per_batch, optimize_masks
from worker_sdk.litho.engine import bytes_per_clip
from worker_sdk.litho.layout import load_layout, rasterize

from .conftest import glp

TINY = ILTConfig(stages=(Stage(8, 3, 0.2), Stage(4, 2, 0.1)), bridge_weight=2.0)


def test_batched_ilt_is_bit_identical_to_one_at_a_time_in_float64(model64, iccad13):
    targets = [rasterize(load_layout(glp(k, iccad13)), "lithobench") for k in (1, 4)]
    n = model64.size
    free = np.zeros((n, n), dtype=np.uint8)
    free[512:1536, 512:1536] = 1
    weight = np.zeros((n, n), dtype=np.uint8)
    weight[256:1792, 256:1792] = 1
    fixeds = [np.roll(t, 16, axis=1) for t in targets]  # a frozen surround that is not the target
    kw = [dict(init=f, free=free, fixed=f, weight=weight, clean=False) for f in fixeds]
    alone = [optimize_mask(model64, t, TINY, **k) for t, k in zip(targets, kw)]
    both = optimize_masks(model64, targets, TINY, inits=fixeds, frees=[free, free], fixeds=fixeds,
                          weights=[weight, weight], clean=False)
    assert len(both) == 2
    for a, b in zip(alone, both):
        assert a.mask.dtype == b.mask.dtype and np.array_equal(a.mask, b.mask)
        assert b.iterations == a.iterations == 5
        # the per-mask loss is summed over a [B, N, N] slice instead of an [N, N] tensor
        np.testing.assert_allclose(b.loss_history, a.loss_history, rtol=1e-12)
    cleaned = optimize_masks(model64, targets[:1], TINY)[0]
    assert np.array_equal(cleaned.mask, optimize_mask(model64, targets[0], TINY).mask)


def test_batch_size_follows_the_memory_budget(model32):
    per = ILT_MEMORY_FACTOR * bytes_per_clip(model32)
    assert ilt_masks_per_batch(model32, 0) == 1
    assert ilt_masks_per_batch(model32, 3 * per + 1) == 3
    assert ilt_masks_per_batch(model32) == max(1, (1 << 30) // per)  # CPU budget: 1 GiB
