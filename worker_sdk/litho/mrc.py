"""Mask-rule cleanup of an optimized raster mask (pure tensor functions).

ILT returns pixel masks with slivers, pinholes and stray material far from
the pattern. A mask shop rejects those, so before a mask is written it is
cleaned to a minimum feature size:

1. material farther than `halo_px` from the target's bounding box is cleared
   (it cannot help the print and the canvas edge would cut it into slivers);
2. a morphological close then open with an odd square structuring element of
   side `min_feature_px` removes gaps and features narrower than that; the
   result is a union of squares, so a projection-metric width check at
   `min_feature_px - 1` passes, and so does a spacing check between distinct
   shapes (closing first makes every gap at least the element; opening only
   removes material). Notches inside one shape are not guaranteed.

The cleaned mask is what gets evaluated, written and committed, so the
claimed metrics always describe the mask the shop would build.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class MaskRules:
    min_feature_px: int = 9
    halo_px: int = 256

    def __post_init__(self) -> None:
        if self.min_feature_px < 1 or self.min_feature_px % 2 == 0:
            raise ValueError("min_feature_px must be a positive odd number (a centred square element)")
        if self.halo_px < 0:
            raise ValueError("halo_px must be >= 0")


def _dilate(x: torch.Tensor, size: int) -> torch.Tensor:
    pad = size // 2
    return F.max_pool2d(F.pad(x, (pad, pad, pad, pad), value=0.0), size, stride=1)


def _erode(x: torch.Tensor, size: int) -> torch.Tensor:
    pad = size // 2
    return -F.max_pool2d(F.pad(-x, (pad, pad, pad, pad), value=-1.0), size, stride=1)


def clean_mask(mask: torch.Tensor, target: torch.Tensor, rules: MaskRules = MaskRules()) -> torch.Tensor:
    """A binary (0/1) mask cleaned to `rules`; same shape and dtype as `mask`."""
    if mask.shape != target.shape or mask.dim() != 2:
        raise ValueError("mask and target must be 2-D tensors of the same shape")
    m = (mask > 0.5).to(torch.float32)
    ys, xs = torch.nonzero(target > 0.5, as_tuple=True)
    if ys.numel():
        h = rules.halo_px
        keep = torch.zeros_like(m)
        keep[max(0, int(ys.min()) - h): int(ys.max()) + h + 1, max(0, int(xs.min()) - h): int(xs.max()) + h + 1] = 1
        m = m * keep
    s = rules.min_feature_px
    if s > 1:
        x = m[None, None]
        x = _erode(_dilate(x, s), s)  # close: fill narrow gaps
        x = _dilate(_erode(x, s), s)  # open: drop narrow features
        m = x[0, 0]
    return m.to(mask.dtype)
