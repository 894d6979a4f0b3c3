"""Evaluation of a mask against a target on one clip or on tiles, in the canvas frame.

The canvas frame ("post_transform_canvas") is layout nm plus an integer shift:
the placement of the fill convention for a single clip, or (-x0 + halo, -y0 + halo)
when the layout is tiled. Tiles are `clip` px windows whose central core
(clip - 2*halo) is kept; cores are stitched into one canvas and metrics are
computed there. Every tile and corner checks the cancellation token.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from worker_sdk.cancel import NEVER, CancellationToken

from .forward import CORNERS, THRESHOLD, SOCSModel
from .layout import Layout, placement, rasterize, rasterize_exact
from .metrics import components, edge_samples, epe_check

DEFAULT_HALO = 512


@dataclass(frozen=True)
class Tile:
    tile_id: str
    row: int
    col: int
    origin: tuple[int, int]  # window origin (x, y) in canvas px
    core: tuple[int, int, int, int]  # x0, y0, x1, y1 in canvas px


@dataclass
class Evaluation:
    fill: str
    shift: tuple[int, int]
    canvas: tuple[int, int]  # height, width
    target: np.ndarray
    mask: np.ndarray
    printed: dict[str, np.ndarray]
    tiles: list[Tile]
    epe_records: list[dict[str, Any]] = field(default_factory=list)
    epe_samples: int = 0

    @property
    def l2(self) -> int:
        return int(np.count_nonzero(self.printed["nominal"] != self.target.astype(bool)))

    @property
    def pvb(self) -> int:
        return int(np.count_nonzero(self.printed["max"] != self.printed["min"]))

    @property
    def epe(self) -> int:
        return len(self.epe_records)

    def tile_of(self, x: float, y: float) -> Tile:
        for t in self.tiles:
            x0, y0, x1, y1 = t.core
            if x0 <= x < x1 and y0 <= y < y1:
                return t
        return self.tiles[-1]


def plan_tiles(width: int, height: int, clip: int, halo: int) -> list[Tile]:
    core = clip - 2 * halo
    if core <= 0:
        raise ValueError("halo too large for the clip")
    tiles = []
    for r in range(math.ceil(height / core)):
        for c in range(math.ceil(width / core)):
            x0, y0 = c * core, r * core
            tiles.append(Tile(f"T_{r}_{c}", r, c, (x0 - halo, y0 - halo), (x0, y0, x0 + core, y0 + core)))
    return tiles


def needs_tiling(layout: Layout, clip: int, margin: int = 128) -> bool:
    x0, y0, x1, y1 = layout.bbox()
    return (x1 - x0) > clip - 2 * margin or (y1 - y0) > clip - 2 * margin


def print_mask(model: SOCSModel, mask: np.ndarray, *, token: CancellationToken = NEVER,
               threshold: float = THRESHOLD) -> dict[str, np.ndarray]:
    t = torch.as_tensor(mask, dtype=model.dtype, device=model.device)
    z = model.printed(t, CORNERS, threshold=threshold, token=token)
    return {k: v[0].cpu().numpy() for k, v in z.items()}


def evaluate(model: SOCSModel, layout: Layout, *, mask: np.ndarray | None = None,
             mask_layout: Layout | None = None, fill: str = "lithobench", tile: bool | None = None,
             halo: int = DEFAULT_HALO, token: CancellationToken = NEVER) -> Evaluation:
    """Simulate the three corners and collect L2/PVB/EPE. mask: raster on the clip canvas; mask_layout: geometry."""
    clip = model.size
    tiled = needs_tiling(layout, clip) if tile is None else tile
    if mask is not None and tiled:
        from .errors import BadRequest
        raise BadRequest("a raster mask only fits a single clip; give the mask as a layout for tiled evaluation")
    if not tiled:
        shift = placement(layout, fill, clip)
        target = rasterize(layout, fill, clip, shift)
        if mask is None:
            # mask geometry is the manufactured shape: its cells are rasterized exactly, whatever the
            # target's fill convention (which only says how the *target* polygons become pixels)
            mask = rasterize(mask_layout, "exact", clip, shift) if mask_layout is not None else target
        token.check()
        printed = print_mask(model, mask, token=token)
        tiles = [Tile("T_0_0", 0, 0, (0, 0), (0, 0, clip, clip))]
        ev = Evaluation(fill, shift, (clip, clip), target, mask, printed, tiles)
    else:
        ev = _evaluate_tiled(model, layout, mask_layout, fill, halo, token)
    token.check()
    samples = edge_samples(layout, ev.shift, fill, max(ev.canvas))
    samples = [s for s in samples if s.inside_px[0] < ev.canvas[0] and s.inside_px[1] < ev.canvas[1]
               and s.outside_px[0] < ev.canvas[0] and s.outside_px[1] < ev.canvas[1]]
    ev.epe_samples = len(samples)
    ev.epe_records = epe_check(samples, ev.printed["nominal"])
    return ev


def _evaluate_tiled(model: SOCSModel, layout: Layout, mask_layout: Layout | None, fill: str, halo: int,
                    token: CancellationToken) -> Evaluation:
    clip = model.size
    x0, y0, x1, y1 = layout.bbox()
    if needs_tiling(layout, clip):
        shift = (halo - x0, halo - y0)
        width, height = (x1 - x0) + 2 * halo, (y1 - y0) + 2 * halo
    else:  # a clip-sized layout keeps the single-clip canvas frame, whichever way it is evaluated
        shift = placement(layout, fill, clip)
        width = height = clip
    tiles = plan_tiles(width, height, clip, halo)
    core = clip - 2 * halo
    hh = math.ceil(height / core) * core
    ww = math.ceil(width / core) * core
    target = rasterize(layout, fill, size=max(hh, ww), shift=shift)[:hh, :ww]
    mlay = mask_layout if mask_layout is not None else layout
    printed = {c.name: np.zeros((hh, ww), dtype=bool) for c in CORNERS}
    mask_full = np.zeros((hh, ww), dtype=np.uint8)
    for t in tiles:
        token.check()  # boundary 1: per tile
        ox, oy = t.origin
        win = rasterize(mlay, fill if mask_layout is None else "exact", size=clip, shift=(shift[0] - ox, shift[1] - oy))
        z = print_mask(model, win, token=token)  # boundary 2 (per corner) inside
        cx0, cy0, cx1, cy1 = t.core
        sl = (slice(cy0 - oy, cy1 - oy), slice(cx0 - ox, cx1 - ox))
        for name, img in z.items():
            printed[name][cy0:cy1, cx0:cx1] = img[sl]
        mask_full[cy0:cy1, cx0:cx1] = win[sl]
    return Evaluation(fill, shift, (hh, ww), target, mask_full, printed, tiles)


def region_records(ev: Evaluation, rule: str) -> list[dict[str, Any]]:
    """Per-tile connected error regions for L2 (nominal vs target) or PVB (max xor min), canvas px.

    Each piece also carries `group_bbox`: the bounding box of the connected region of the whole
    stitched canvas that contains it, so grouping does not depend on where tiles cut.
    """
    import klayout.db as kdb

    from .layout import raster_to_region

    if rule == "l2":
        err = ev.printed["nominal"] != ev.target.astype(bool)
    elif rule == "pvb":
        err = ev.printed["max"] != ev.printed["min"]
    else:
        raise ValueError(rule)
    labels = np.full(err.shape, -1, dtype=np.int32)
    boxes: list[list[int]] = []
    for k, poly in enumerate(raster_to_region(err).each()):
        b = poly.bbox()
        boxes.append([b.left, b.bottom, b.right, b.top])
        for piece in kdb.Region(poly).decompose_trapezoids():
            pb = piece.bbox()
            labels[pb.bottom:pb.top, pb.left:pb.right] = np.where(
                err[pb.bottom:pb.top, pb.left:pb.right], k, labels[pb.bottom:pb.top, pb.left:pb.right])
    out = []
    for t in ev.tiles:
        x0, y0, x1, y1 = t.core
        x1, y1 = min(x1, ev.canvas[1]), min(y1, ev.canvas[0])
        sub = err[y0:y1, x0:x1]
        if not sub.any():
            continue
        for poly in raster_to_region(sub).each():
            box = poly.bbox()
            # a pixel of this piece: the lowest row's first set pixel inside its bbox
            rows = sub[box.bottom:box.top, box.left:box.right]
            ry, rx = np.argwhere(rows)[0]
            label = int(labels[y0 + box.bottom + ry, x0 + box.left + rx])
            out.append({"tile": t, "area": int(poly.area()),
                        "bbox": [box.left + x0, box.bottom + y0, box.right + x0, box.top + y0],
                        "x": (box.left + box.right) / 2.0 + x0, "y": (box.bottom + box.top) / 2.0 + y0,
                        "group_bbox": boxes[label]})
    out.sort(key=lambda r: (r["y"], r["x"], r["tile"].tile_id))
    return out
