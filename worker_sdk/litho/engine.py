"""Evaluation of a mask against a target on one clip or on tiles, in the canvas frame.

The canvas frame ("post_transform_canvas") is layout nm plus an integer shift:
the placement of the fill convention for a single clip, or (-x0 + halo, -y0 + halo)
when the layout is tiled. Tiles are `clip` px windows whose central core
(clip - 2*halo) is kept; cores are stitched into one canvas and metrics are
computed there. Every tile and corner checks the cancellation token.

Single clips are simulated in batches: `evaluate_batch` stacks clips into one
[B, N, N] tensor, as many as a memory budget allows, and `evaluate` is a batch
of one through the same code, so both give the same bits (the CUDA path is
this code with device="cuda").
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from worker_sdk.cancel import NEVER, CancellationToken

from .forward import THRESHOLD, SOCSModel
from .layout import Layout, placement, rasterize
from .metrics import epe_check, epe_distances, epe_samples, label_components, pv_band, topology
from .process import DEFAULT, ProcessWindow

DEFAULT_HALO = 512


@dataclass(frozen=True)
class Tile:
    tile_id: str
    row: int
    col: int
    origin: tuple[int, int]  # window origin (x, y) in canvas px
    core: tuple[int, int, int, int]  # x0, y0, x1, y1 in canvas px


# a tile's core prints (corner -> bool core) made elsewhere, or None: simulate it
CorePrints = Callable[[Tile], "dict[str, np.ndarray] | None"]


class ScoreViews:
    """What every evaluation, whole-canvas or streamed, derives from its records and tiles."""

    epe_records: list[dict[str, Any]]
    topology: dict[str, list[dict[str, Any]]]
    tiles: list[Tile]

    @property
    def epe(self) -> int:
        return len(self.epe_records)

    @property
    def topology_defects(self) -> int:
        return sum(len(v) for v in self.topology.values())

    def tile_of(self, x: float, y: float) -> Tile:
        for t in self.tiles:
            x0, y0, x1, y1 = t.core
            if x0 <= x < x1 and y0 <= y < y1:
                return t
        return self.tiles[-1]


@dataclass
class Evaluation(ScoreViews):
    fill: str
    shift: tuple[int, int]
    canvas: tuple[int, int]  # height, width
    target: np.ndarray
    mask: np.ndarray
    printed: dict[str, np.ndarray]
    tiles: list[Tile]
    window: ProcessWindow = DEFAULT
    epe_records: list[dict[str, Any]] = field(default_factory=list)
    epe_samples: int = 0
    topology: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # corner -> defects
    epe_nm: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # signed EPE per sample

    @property
    def l2(self) -> int:
        return int(np.count_nonzero(self.printed["nominal"] != self.target.astype(bool)))

    @property
    def pvb(self) -> int:
        return int(np.count_nonzero(pv_band(self.printed, self.window.pvb_names)))

    @property
    def pvb_grid(self) -> int | None:
        if not self.window.grid:
            return None
        return int(np.count_nonzero(pv_band(self.printed, self.window.grid_names)))



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


def print_masks(model: SOCSModel, masks: Sequence[np.ndarray], corners, *, token: CancellationToken = NEVER,
                threshold: float = THRESHOLD) -> list[dict[str, np.ndarray]]:
    """Prints of B clip masks, simulated as one [B, N, N] tensor (one entry per mask, corner -> bool [N, N])."""
    t = torch.as_tensor(np.stack([np.asarray(m) for m in masks]), dtype=model.dtype, device=model.device)
    z = model.printed(t, corners, threshold=threshold, token=token)
    host = {k: v.cpu().numpy() for k, v in z.items()}
    return [{k: v[i] for k, v in host.items()} for i in range(len(masks))]


def print_mask(model: SOCSModel, mask: np.ndarray, *, token: CancellationToken = NEVER,
               threshold: float = THRESHOLD, window: ProcessWindow = DEFAULT) -> dict[str, np.ndarray]:
    return print_masks(model, [mask], window.simulated, token=token, threshold=threshold)[0]


def bytes_per_clip(model: SOCSModel, window: ProcessWindow = DEFAULT) -> int:
    """Working memory of one clip in `printed`, an upper estimate: the real mask, one intensity
    per kernel set plus two synthesis temporaries at the model's float size, and one bool
    print per simulated corner (the spectra and kernel fields are under 1% of that)."""
    n2 = model.size * model.size
    item = torch.finfo(model.dtype).bits // 8
    kernel_sets = len({c.kernel for c in window.simulated})
    return n2 * (item * (1 + kernel_sets + 2) + len(window.simulated))


def clips_per_batch(model: SOCSModel, memory_bytes: int, window: ProcessWindow = DEFAULT) -> int:
    """How many clips fit one batched call within `memory_bytes` (at least one)."""
    return max(1, int(memory_bytes) // bytes_per_clip(model, window))


def default_memory_budget(model: SOCSModel) -> int:
    """Half the free device memory on CUDA; 1 GiB on CPU."""
    if model.device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(model.device)
        return int(free // 2)
    return 1 << 30


@dataclass(frozen=True)
class ClipInput:
    """One clip to evaluate: the target layout and its mask (raster on the clip canvas, geometry, or None = target)."""
    layout: Layout
    mask: np.ndarray | None = None
    mask_layout: Layout | None = None


def _prepare(model: SOCSModel, clip: ClipInput, fill: str) -> tuple[tuple[int, int], np.ndarray, np.ndarray]:
    shift = placement(clip.layout, fill, model.size)
    target = rasterize(clip.layout, fill, model.size, shift)
    mask = clip.mask
    if mask is None:
        # mask geometry is the manufactured shape: its cells are rasterized exactly, whatever the
        # target's fill convention (which only says how the *target* polygons become pixels)
        mask = rasterize(clip.mask_layout, "exact", model.size, shift) if clip.mask_layout is not None else target
    return shift, target, mask


def evaluate_batch(model: SOCSModel, clips: Sequence[ClipInput], *, fill: str = "lithobench",
                   window: ProcessWindow = DEFAULT, memory_bytes: int | None = None,
                   token: CancellationToken = NEVER) -> list[Evaluation]:
    """Evaluate clips (each on one clip canvas, untiled), simulated `clips_per_batch` at a time as
    one [B, N, N] tensor. Each result is what `evaluate(tile=False)` gives for that clip alone
    (same code, same bits on CPU)."""
    clip_px = model.size
    per = clips_per_batch(model, memory_bytes if memory_bytes is not None else default_memory_budget(model), window)
    out: list[Evaluation] = []
    for lo in range(0, len(clips), per):
        token.check()
        chunk = clips[lo:lo + per]
        prepared = [_prepare(model, c, fill) for c in chunk]
        prints = print_masks(model, [m for _, _, m in prepared], window.simulated, token=token)
        for (shift, target, mask), printed in zip(prepared, prints):
            tiles = [Tile("T_0_0", 0, 0, (0, 0), (0, 0, clip_px, clip_px))]
            ev = Evaluation(fill, shift, (clip_px, clip_px), target, mask, printed, tiles, window)
            _finish(ev, token)
            out.append(ev)
    return out


def _finish(ev: Evaluation, token: CancellationToken) -> None:
    """EPE (LithoBench's rule on the rasterized target) and topology at every corner of the window."""
    token.check()
    samples = epe_samples(ev.target)
    ev.epe_samples = len(samples)
    ev.epe_records = epe_check(samples, ev.printed["nominal"])
    ev.epe_nm = epe_distances(samples, ev.printed["nominal"])
    tl = label_components(ev.target)
    for c in ev.window.corners:
        token.check()
        ev.topology[c.name] = topology(ev.target, ev.printed[c.name], tl)


def evaluate(model: SOCSModel, layout: Layout, *, mask: np.ndarray | None = None,
             mask_layout: Layout | None = None, fill: str = "lithobench", tile: bool | None = None,
             halo: int = DEFAULT_HALO, window: ProcessWindow = DEFAULT,
             token: CancellationToken = NEVER, prints_of: CorePrints | None = None) -> Evaluation:
    """Simulate the window's corners and collect L2/PVB/EPE/topology. mask: raster on the clip canvas; mask_layout: geometry.
    `prints_of(tile)` (tiled only) may give a tile's core prints made elsewhere from the same mask
    window: they are pasted, not simulated again."""
    clip = model.size
    tiled = needs_tiling(layout, clip) if tile is None else tile
    if mask is not None and tiled:
        from .errors import BadRequest
        raise BadRequest("a raster mask only fits a single clip; give the mask as a layout for tiled evaluation")
    if not tiled:
        token.check()
        return evaluate_batch(model, [ClipInput(layout, mask, mask_layout)], fill=fill, window=window,
                              memory_bytes=0, token=token)[0]
    ev = _evaluate_tiled(model, layout, mask_layout, fill, halo, window, token, prints_of)
    _finish(ev, token)
    return ev


def _evaluate_tiled(model: SOCSModel, layout: Layout, mask_layout: Layout | None, fill: str, halo: int,
                    window: ProcessWindow, token: CancellationToken, prints_of: CorePrints | None = None) -> Evaluation:
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
    printed = {c.name: np.zeros((hh, ww), dtype=bool) for c in window.simulated}
    mask_full = np.zeros((hh, ww), dtype=np.uint8)
    for t in tiles:
        token.check()  # boundary 1: per tile
        ox, oy = t.origin
        win = rasterize(mlay, fill if mask_layout is None else "exact", size=clip, shift=(shift[0] - ox, shift[1] - oy))
        cx0, cy0, cx1, cy1 = t.core
        sl = (slice(cy0 - oy, cy1 - oy), slice(cx0 - ox, cx1 - ox))
        made = prints_of(t) if prints_of is not None else None
        if made is None:
            z = print_mask(model, win, token=token, window=window)  # boundary 2 (per corner) inside
            made = {name: img[sl] for name, img in z.items()}
        for name, img in made.items():
            printed[name][cy0:cy1, cx0:cx1] = img
        mask_full[cy0:cy1, cx0:cx1] = win[sl]
    return Evaluation(fill, shift, (hh, ww), target, mask_full, printed, tiles, window)


def region_records(ev: Evaluation, rule: str) -> list[dict[str, Any]]:
    """Per-tile connected error regions for L2 (nominal vs target) or PVB (max xor min), canvas px.

    Each piece also carries `group_bbox`: the bounding box of the connected region of the whole
    stitched canvas that contains it, so grouping does not depend on where tiles cut. A streamed
    evaluation found the same pieces tile by tile (`topostream.RegionStitcher`).
    """
    if getattr(ev, "regions", None) is not None:
        return list(ev.regions[rule])
    import klayout.db as kdb

    from .layout import raster_to_region

    if rule == "l2":
        err = ev.printed["nominal"] != ev.target.astype(bool)
    elif rule == "pvb":
        err = pv_band(ev.printed, ev.window.pvb_names)
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
            # a pixel of this piece: a corner of its first trapezoid (a rectangle of the piece;
            # the piece's box may also hold pixels of other pieces)
            traps = kdb.Region(poly).decompose_trapezoids()  # held: iterating a temporary crashes
            first = next(iter(traps.each())).bbox()
            label = int(labels[y0 + first.bottom, x0 + first.left])
            out.append({"tile": t, "area": int(poly.area()),
                        "bbox": [box.left + x0, box.bottom + y0, box.right + x0, box.top + y0],
                        "x": (box.left + box.right) / 2.0 + x0, "y": (box.bottom + box.top) / 2.0 + y0,
                        "group_bbox": boxes[label]})
    out.sort(key=lambda r: (r["y"], r["x"], r["tile"].tile_id))
    return out
