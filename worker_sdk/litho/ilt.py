"""Inverse lithography: gradient-based mask optimisation through the band-limited SOCS model.

The gradient is the exact adjoint of the forward model (torch autograd through
the same transforms the forward pass uses; no approximate "combo" kernel).

Schedule (multi-resolution): the mask is parameterised on a coarse grid
(pixel = s nm, nearest upsampling, whose spectrum the model handles exactly
via the box factor) and the loss is computed on intensity samples at the same
pitch (pixel centres, exact Fourier samples). Stages run from coarse to fine;
each stage's parameters are upsampled into the next. The final mask is
binarised at 0.5 and cleaned (islands and holes below a minimum area removed,
a morphological open/close of the minimum width), then evaluated at 1 nm.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Stage:
    scale: int  # nm per parameter pixel (divides the canvas)
    iterations: int
    lr: float


@dataclass(frozen=True)
class ILTConfig:
    stages: tuple[Stage, ...] = (Stage(8, 80, 0.2), Stage(4, 60, 0.1))
    mask_steepness: float = 4.0
    pvb_weight: float = 0.3  # weight of the max/min corner L2 terms
    band_weight: float = 4.0  # weight of sum (Z_max - Z_min)^2, the smooth PV band
    min_feature_nm: int = 4  # open/close width of the clean-up
    min_area_nm2: int = 64  # islands / holes smaller than this are removed
    seed: int = 0
    init_noise: float = 0.0
    # topology: extra weight on printing in the narrow gaps between distinct target shapes
    # (pixels outside the target within bridge_gap_nm of two of them), where a print is a bridge
    bridge_weight: float = 0.0
    bridge_gap_nm: int = 40

    @classmethod
    def from_request(cls, request: dict) -> "ILTConfig":
        """The configuration an optimize request asks for (after its preset is applied)."""
        cfg = cls(seed=int(request.get("seed", 0)), bridge_weight=float(request.get("bridge_weight", 0.0)))
        for key in ("pvb_weight", "band_weight"):
            if request.get(key) is not None:
                cfg = dataclasses.replace(cfg, **{key: float(request[key])})
        return cfg.scaled(request.get("iterations"))

    def scaled(self, iterations: int | None) -> "ILTConfig":
        """Spread a total iteration budget over the stages in proportion."""
        if not iterations:
            return self
        total = sum(s.iterations for s in self.stages)
        stages = tuple(Stage(s.scale, max(1, round(iterations * s.iterations / total)), s.lr) for s in self.stages)
        return dataclasses.replace(self, stages=stages)


@dataclass
class ILTResult:
    mask: np.ndarray  # uint8 {0,1} at 1 nm
    loss_history: list[float] = field(default_factory=list)
    iterations: int = 0
    seconds: float = 0.0


def setup_determinism(seed: int) -> None:
    torch.manual_seed(seed)
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)
    except Exception:  # pragma: no cover - older torch
        pass


def bridge_gaps(target: np.ndarray, gap: int) -> np.ndarray:
    """float {0,1}: pixels outside the target with two different target shapes (4-connected
    components) within `gap` px (Chebyshev): where a print would join them."""
    from .metrics import label_components

    lab = torch.as_tensor(label_components(target).labels.astype(np.float32))[None, None]
    k = 2 * gap + 1

    def pool(x: torch.Tensor) -> torch.Tensor:  # separable: a row max, then a column max
        x = F.max_pool2d(x, (1, k), stride=1, padding=(0, gap))
        return F.max_pool2d(x, (k, 1), stride=1, padding=(gap, 0))

    hi = pool(lab)
    big = float(lab.max()) + 1.0
    lo = -pool(-torch.where(lab > 0, lab, torch.full_like(lab, big)))
    out = (lab == 0) & (hi > 0) & (lo < big) & (hi != lo)
    return out[0, 0].numpy().astype(np.float32)


def _morph(img: torch.Tensor, k: int, op: str) -> torch.Tensor:
    x = img[None, None].float()
    pad = k // 2
    if op == "dilate":  # the reflected window of erode, so open/close do not shift edges
        y = F.max_pool2d(F.pad(x, (k - 1 - pad, pad, k - 1 - pad, pad), value=0.0), k, 1)
    else:
        y = -F.max_pool2d(F.pad(-x, (pad, k - 1 - pad, pad, k - 1 - pad), value=-1.0), k, 1)
    return y[0, 0]


def cleanup(mask: np.ndarray, min_feature: int, min_area: int) -> np.ndarray:
    """Mask-rule-friendly clean-up of a binary raster: open, close, then drop small islands and holes."""
    m = torch.as_tensor(mask.astype(np.uint8))
    if min_feature > 1:
        m = _morph(_morph(m, min_feature, "erode"), min_feature, "dilate")  # open: removes thin slivers
        m = _morph(_morph(m, min_feature, "dilate"), min_feature, "erode")  # close: fills thin gaps
    out = (m > 0.5).numpy().astype(np.uint8)
    if min_area > 0:
        out = _drop_small(out, min_area, 1)
        out = _drop_small(out, min_area, 0)
    return out


def _drop_small(mask: np.ndarray, min_area: int, value: int) -> np.ndarray:
    from .layout import raster_to_region

    sel = (mask == value)
    if value == 0:  # holes: regions of 0 not touching the border
        sel = sel.copy()
    region = raster_to_region(sel)
    out = mask.copy()
    h, w = mask.shape
    for poly in region.each():
        box = poly.bbox()
        if poly.area() >= min_area:
            continue
        if value == 0 and (box.left == 0 or box.bottom == 0 or box.right == w or box.top == h):
            continue
        import klayout.db as kdb

        for piece in kdb.Region(poly).decompose_convex():
            b = piece.bbox()
            out[b.bottom:b.top, b.left:b.right] = 1 - value
    return out
