"""Mask-rule cleanup of an optimized raster mask (pure tensor functions).

ILT returns pixel masks with slivers, pinholes and stray material far from
the pattern. A mask shop rejects those, so before a mask is written it is
cleaned to a minimum feature size:

1. material farther than `halo_px` from the target's bounding box is cleared
   (it cannot help the print and the canvas edge would cut it into slivers);
2. a morphological close (square of side `min_feature_px + close_margin_px`)
   then open with an odd square structuring element of side `min_feature_px` removes gaps and features narrower than that; the
   result is a union of squares, so a projection-metric width check at
   `min_feature_px - 1` always passes. Spacing is what the closing enforces
   (closing first fills gaps narrower than its element; opening only
   removes material). Opening can split a shape at an offset junction and
   leave a gap below the minimum; such gaps (and any sliver a bridge would
   make) are then repaired by adding the grown error regions of projection
   space and width checks, as a mask-rule fixer would. The mask-rule deck
   run after optimization is what certifies a mask.

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
    min_area_px: int = 0  # islands and holes smaller than this are removed / filled
    # gaps narrower than this left after opening (at offset junctions) are
    # bridged; 0 means min_feature_px - 1
    min_space_px: int = 0
    # closing uses a slightly larger square: a gap shorter than the element is
    # not filled by a same-size close, which would leave a sub-minimum space
    close_margin_px: int = 4

    def __post_init__(self) -> None:
        if self.min_feature_px < 1 or self.min_feature_px % 2 == 0:
            raise ValueError("min_feature_px must be a positive odd number (a centred square element)")
        if self.close_margin_px < 0 or self.close_margin_px % 2:
            raise ValueError("close_margin_px must be a non-negative even number")
        if self.min_area_px < 0:
            raise ValueError("min_area_px must be >= 0")
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
    m = clear_frame(m, s)
    if s > 1:
        x = m[None, None]
        c = s + rules.close_margin_px
        x = _erode(_dilate(x, c), c)  # close: fill narrow gaps
        x = _dilate(_erode(x, s), s)  # open: drop narrow features
        m = x[0, 0]
    space = rules.min_space_px or max(0, s - 1)
    if space > 1:
        m = _bridge_narrow_gaps(m, space, s)
    if rules.min_area_px > 0:
        m = _drop_small(m, rules.min_area_px)
    return m.to(mask.dtype)


def clear_frame(m: torch.Tensor, width: int) -> torch.Tensor:
    """`m` with a frame of `width` pixels along the canvas edge cleared. The morphology treats
    the outside of the canvas as material, so a shape the canvas edge cuts would keep any width
    there; clearing the frame first keeps every cleaned shape whole inside the canvas."""
    if width <= 0:
        return m
    out = m.clone()
    out[:width] = 0
    out[-width:] = 0
    out[:, :width] = 0
    out[:, -width:] = 0
    return out


def _bridge_narrow_gaps(m: torch.Tensor, space: int, frame: int = 0) -> torch.Tensor:
    """Repair what opening leaves behind, the way a mask-rule fixer does.
    Projection metric first: fill every gap narrower than `space` and thicken
    every feature narrower than `space` by adding the checker's error regions,
    grown by half the space so a bridge is never itself a sliver. When the
    projection checks are clean, the Euclidean ones (corner to corner, which
    projection does not see): a thin neck or a corner-to-corner touch is
    thickened the same way, and a corner-to-corner gap is cut open, by
    clearing the box between the two corners grown by a few nm. A few rounds
    reach a clean mask; `rule_violations` certifies it. Nothing is added inside
    the cleared frame of `frame` pixels along the canvas edge."""
    import klayout.db as kdb

    from .layout import raster_to_region

    region = raster_to_region(m.numpy() > 0.5)
    h, w = m.shape
    inside = kdb.Region(kdb.Box(frame, frame, w - frame, h - frame))
    changed = False
    proj, eucl = kdb.Metrics.Projection, kdb.Metrics.Euclidian
    for _ in range(24):
        gaps = region.space_check(space, False, proj)
        thin = region.width_check(space, False, proj)
        if gaps.is_empty() and thin.is_empty():
            thin = region.width_check(space, False, eucl)
            gaps = region.space_check(space, False, eucl)
            if gaps.is_empty() and thin.is_empty():
                break
            region = (region + (_boxes(thin, space // 2) & inside)).merged()
            if thin.is_empty():
                region = (region - _boxes(gaps, 2)).merged()
        else:
            region = (region + ((_boxes(gaps, space // 2) + _boxes(thin, space // 2)) & inside)).merged()
        changed = True
    return _to_raster(region, tuple(m.shape)) if changed else m


def _boxes(pairs, grow: int):
    """A Region of each marker's bounding box grown by `grow`: rectilinear, so it rasterises exactly
    (a Euclidean marker's own polygon is a slanted quadrilateral, or a line for a touch)."""
    import klayout.db as kdb

    out = kdb.Region()
    for pair in pairs.each():
        out.insert(pair.bbox().enlarged(grow, grow))
    return out


def _drop_small(m: torch.Tensor, min_area: int) -> torch.Tensor:
    """Remove islands and fill holes smaller than min_area pixels (4-connected),
    with KLayout's polygon merge doing the connectivity work."""
    from .layout import raster_to_region

    region = raster_to_region(m.numpy() > 0.5)
    kept = region.with_area(min_area, None, False)
    holes = kept.holes().with_area(None, min_area, False)
    return _to_raster((kept + holes).merged(), tuple(m.shape))


def _to_raster(region, shape: tuple[int, int]) -> torch.Tensor:
    """A merged klayout.db Region back to a 0/1 raster (pixel = 1 dbu)."""
    import numpy as np

    from .layout import rasterize_exact

    polys = []
    for poly in region.each():
        if not poly.holes():
            polys.append([(pt.x, pt.y) for pt in poly.each_point_hull()])
            continue
        parts = type(region)(poly).decompose_convex()  # hole-free pieces; keep `parts` alive while reading
        for piece in parts.each():
            polys.append([(pt.x, pt.y) for pt in piece.each_point_hull()])
    out = rasterize_exact(polys, shape)
    return torch.from_numpy(np.ascontiguousarray(out).astype(np.float32))


def rule_violations(mask, rules: MaskRules) -> dict[str, int]:
    """Markers of the mask-rule check on a 0/1 raster (1 pixel = 1 nm), as the decks of
    registry/mask_rules.py count them: widths and spaces below min_feature_px / min_space_px with
    the projection and the Euclidean metric, corner-to-corner touches (a zero-width neck, which
    only the Euclidean metric sees) and shapes below min_area_px."""
    import numpy as np

    from .layout import raster_to_region
    import klayout.db as kdb

    region = raster_to_region(np.asarray(mask) > 0.5)
    space = rules.min_space_px or rules.min_feature_px
    proj, eucl = kdb.Metrics.Projection, kdb.Metrics.Euclidian
    return {"width": region.width_check(rules.min_feature_px, False, proj).count(),
            "space": region.space_check(space, False, proj).count(),
            "width_euclidean": region.width_check(rules.min_feature_px, False, eucl).count(),
            "space_euclidean": region.space_check(space, False, eucl).count(),
            "corner_touch": region.width_check(1, False, eucl).count(),
            "area": region.with_area(None, rules.min_area_px, False).count() if rules.min_area_px else 0}
