"""Pictures of a tiled mask made tile by tile, with memory flat in the tile count.

The whole-canvas renderer (`pictures.render_whole`) simulates the layout at
once: about 18.5 bytes a canvas pixel, some 9 GB for the 462-tile block. Here
the plan's tiles are taken one at a time, row-major, and only one tile's
arrays live at once:

- The prints of a tile come from the tile folder's evaluation record
  (`evals/<tile>.json`, made in the waves: `tiled.evaluate_tiles`) when that
  record is exact for the committed mask: the digests of the nine cores its
  window read are recomputed from the committed mask's own geometry (never read
  from the folder), its target must be the layout's, and where the metrics
  report gives the tile's L2 and PVB, the record's prints must count to them.
  Any other tile (no record, a stale or altered one) has its own window
  simulated (`streaming.tile_eval`), so a record that does not match the mask
  never puts its prints in a picture.
- The tile's core then gives its own picture (target, mask, nominal print),
  its share of each overview picture (`Overview`: each output pixel the mean
  colour of the canvas pixels under it), and its share of every DRC close-up
  window that meets it (`CloseUp`).

Peak memory: one tile window (when simulated) or one core's layers, the
overview counters (SIZE x SIZE cells, one counter per layer combination) and
at most MAX_CROPS close-ups: the same for 4 tiles or 462.
"""
from __future__ import annotations

import binascii
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from PIL import Image

from . import tiled
from .engine import Tile
from .inputs import window as default_window
from .layout import Layout
from .metrics import pv_band
from .drawing import (BLACK, BLUE_PRINT, CROP_SIZE, GRAY_TARGET, MAX_CROPS, ORANGE, SIZE, annotate, rgb, save_picture,
                       crop_box, square_box, tile_name)
from .streaming import PolygonIndex, TileEval, core_raster, tile_eval, tile_eval_from_record, window_raster

CORNERS = ("nominal", "max", "min")  # the prints the pictures show

# name -> the layers' colours and opacities, in blending order (the whole-canvas pictures' own)
OVERVIEWS: dict[str, list[tuple[np.ndarray, float]]] = {
    "target": [(BLACK, 1.0)],
    "mask": [(BLACK, 1.0)],
    **{f"print_{c}": [(GRAY_TARGET, 1.0), (BLUE_PRINT, 0.6)] for c in CORNERS},
    "violations": [(GRAY_TARGET, 1.0), (BLUE_PRINT, 0.35)],
}
BOTH = [(GRAY_TARGET, 1.0), (BLACK, 0.55), (BLUE_PRINT, 0.35)]  # a tile's picture and a close-up


def _layers(name: str, tgt: np.ndarray, msk: np.ndarray, prints: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    if name == "target":
        return [tgt]
    if name == "mask":
        return [msk]
    if name == "violations":
        return [tgt, prints["nominal"]]
    return [tgt, prints[name[len("print_"):]]]


class Overview:
    """A size x size picture of canvas `box` (y0, x0, y1, x1) made core by core. A canvas pixel's
    colour depends only on which layers cover it, so each output pixel keeps a count per layer
    combination, and its colour is the mean of the canvas pixels under it (a box filter)."""

    def __init__(self, box: tuple[int, int, int, int], colours: list[tuple[np.ndarray, float]],
                 size: int = SIZE) -> None:
        self.box, self.size, self.k = box, size, len(colours)
        n = 1 << self.k
        self.counts = np.zeros((size, size, n), dtype=np.int32)
        codes = np.arange(n)
        on = [((codes >> i) & 1).astype(bool)[None, :] for i in range(self.k)]
        self.palette = rgb([(m, c, a) for m, (c, a) in zip(on, colours)], (1, n))[0]  # combination -> RGB

    def add(self, origin: tuple[int, int], layers: Sequence[np.ndarray]) -> None:
        """Count a core whose pixel [0, 0] is canvas (x, y) = `origin`."""
        y0, x0, y1, x1 = self.box
        ox, oy = origin
        h, w = layers[0].shape
        ry0, ry1, rx0, rx1 = max(oy, y0), min(oy + h, y1), max(ox, x0), min(ox + w, x1)
        if ry0 >= ry1 or rx0 >= rx1:
            return
        rows = (np.arange(ry0, ry1) - y0) * self.size // (y1 - y0)
        cols = (np.arange(rx0, rx1) - x0) * self.size // (x1 - x0)
        i0, j0 = int(rows[0]), int(cols[0])
        nr, nc, n = int(rows[-1]) - i0 + 1, int(cols[-1]) - j0 + 1, 1 << self.k
        code = np.zeros((ry1 - ry0, rx1 - rx0), dtype=np.int64)
        for i, m in enumerate(layers):
            code |= np.asarray(m[ry0 - oy:ry1 - oy, rx0 - ox:rx1 - ox], dtype=bool).astype(np.int64) << i
        code += (((rows - i0)[:, None] * nc + (cols - j0)[None, :]) * n)
        self.counts[i0:i0 + nr, j0:j0 + nc] += np.bincount(code.ravel(), minlength=nr * nc * n).reshape(
            nr, nc, n).astype(np.int32)

    def image(self) -> Image.Image:
        total = self.counts.sum(axis=-1, keepdims=True)
        img = np.where(total > 0, (self.counts @ self.palette) / np.maximum(total, 1), 255.0)
        # canvas row 0 is the layout's bottom: flip for viewing, as the whole-canvas pictures do
        return Image.fromarray(np.clip(np.rint(img[::-1]), 0, 255).astype(np.uint8))


@dataclass
class CloseUp:
    """One DRC close-up: the canvas window `box` (y0, x0, y1, x1) around `point` (canvas x, y),
    filled from the cores that meet it."""
    box: tuple[int, int, int, int]
    point: tuple[int, int]
    img: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        y0, x0, y1, x1 = self.box
        self.img = np.full((y1 - y0, x1 - x0, 3), 255.0, dtype=np.float32)

    def add(self, origin: tuple[int, int], rgb: np.ndarray) -> None:
        y0, x0, y1, x1 = self.box
        ox, oy = origin
        h, w = rgb.shape[:2]
        ry0, ry1, rx0, rx1 = max(oy, y0), min(oy + h, y1), max(ox, x0), min(ox + w, x1)
        if ry0 < ry1 and rx0 < rx1:
            self.img[ry0 - y0:ry1 - y0, rx0 - x0:rx1 - x0] = rgb[ry0 - oy:ry1 - oy, rx0 - ox:rx1 - ox]

    def save(self, path: Path) -> None:
        y0, x0, y1, x1 = self.box
        save_picture(self.img, (0, 0, y1 - y0, x1 - x0), path, [(self.point[0] - x0, self.point[1] - y0)],
              size=CROP_SIZE, marker_colour=ORANGE)


@dataclass
class StreamedPictures:
    written: list[Path]
    from_records: list[str]  # tiles whose prints came from a verified evaluation record
    simulated: list[str]  # tiles simulated on their own window (no record, or one that does not fit)


def geometry_box(layout: Layout, fill: str, shift: tuple[int, int]) -> tuple[int, int, int, int] | None:
    """(y0, x0, y1, x1), inclusive: the canvas pixels a layout's raster can cover under a fill
    (the lithobench fill reaches one pixel further up and right). Pure."""
    if not layout.polygons:
        return None
    x0, y0, x1, y1 = layout.bbox()
    reach = 0 if fill == "exact" else 1
    return y0 + shift[1], x0 + shift[0], y1 - 1 + reach + shift[1], x1 - 1 + reach + shift[0]


def overview_box(layout: Layout, mask_layout: Layout, fill: str, shift: tuple[int, int],
                 canvas: tuple[int, int]) -> tuple[int, int, int, int]:
    """The overview pictures' canvas window: the pattern (target and mask) with a margin, square,
    as the whole-canvas pictures frame it, from the geometry alone."""
    boxes = [b for b in (geometry_box(layout, fill, shift), geometry_box(mask_layout, "exact", shift)) if b]
    if not boxes:
        return 0, 0, canvas[0], canvas[1]
    return square_box(min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes),
                      max(b[3] for b in boxes), canvas)


class CoreDigests:
    """The committed mask's core digests (as a tile folder records them), made on demand from its
    geometry and kept as strings only."""

    def __init__(self, index: PolygonIndex, plan: tiled.TilePlan) -> None:
        self.index, self.plan, self.known = index, plan, {}

    def core(self, t: Tile) -> np.ndarray:
        return core_raster(self.index, "exact", self.plan.shift, t)

    def of(self, t: Tile, core: np.ndarray | None = None) -> str:
        if t.tile_id not in self.known:
            self.known[t.tile_id] = tiled.core_digest(self.core(t) if core is None else core)
        return self.known[t.tile_id]


def record_eval(root: Path | None, plan: tiled.TilePlan, t: Tile, digests: CoreDigests, model, window,
                tgt: np.ndarray, figures: Mapping[str, Any] | None = None) -> TileEval | None:
    """The tile's evaluation from the tile folder's record when it is exact for the committed mask
    (the cores its window read, digested from the mask's geometry), its target is `tgt`, and its
    prints count to the tile's reported L2 and PVB (`figures`, when given); else None."""
    rec = tiled.read_eval(root, t.tile_id) if root is not None else None
    if rec is None:
        return None
    cores = {u.tile_id: digests.of(u) for u in (t, *plan.neighbours(t))}
    if not tiled.eval_fits(rec, t, dict(sorted(cores.items())), model, window):
        return None
    try:
        te = tile_eval_from_record(rec["after"])
    except (KeyError, TypeError, ValueError, IndexError, zlib.error, binascii.Error):
        return None
    if (te.tile_id != t.tile_id or te.target.shape != tgt.shape or not np.array_equal(te.target, tgt.astype(bool))
            or any(te.prints.get(c) is None or te.prints[c].shape != tgt.shape for c in window.pvb_names + CORNERS)):
        return None
    figures = figures or {}
    l2 = figures.get("l2_nm2")
    if l2 is not None and int(l2) != int(np.count_nonzero(te.prints["nominal"] != te.target)):
        return None
    pvb = figures.get("pvb_nm2")
    if pvb is not None and int(pvb) != int(np.count_nonzero(pv_band(te.prints, window.pvb_names))):
        return None
    return te


def _simulate(model, plan: tiled.TilePlan, t: Tile, tindex: PolygonIndex, mindex: PolygonIndex, fill: str,
              window) -> TileEval:
    """The tile's own window of the target and the committed mask, simulated (one window's memory)."""
    tgt = window_raster(tindex, fill, plan.clip, plan.shift, t)
    msk = window_raster(mindex, "exact", plan.clip, plan.shift, t)
    te, z = tile_eval(model, t, tgt, msk, window=window)
    del z, tgt, msk
    return te


def render_tiled(model, layout: Layout, mask_layout: Layout, out: Path, *, tile_dir: Path | None = None,
                 fill: str = "lithobench", crops: Sequence[Mapping[str, float]] = (),
                 tiles: Sequence[Mapping[str, Any]] = (), window=None) -> StreamedPictures:
    """The report's pictures of a tiled mask, tile by tile: the overviews (target, mask, the three
    prints, violations at SIZE px), the close-ups around `crops` (layout nm) and one picture per
    tile of `tiles` ({"tile_id", "core_nm", optional "l2_nm2", "pvb_nm2"}), the same files the
    whole-canvas renderer writes."""
    window = window or default_window({}, model)
    plan = tiled.plan_layout(layout, model, fill)
    dx, dy = plan.shift
    tindex, mindex = PolygonIndex(layout), PolygonIndex(mask_layout)
    digests = CoreDigests(mindex, plan)
    box = overview_box(layout, mask_layout, fill, plan.shift, plan.canvas)
    overviews = {name: Overview(box, colours) for name, colours in OVERVIEWS.items()}
    closeups = []
    for point in list(crops)[:MAX_CROPS]:
        cx, cy = int(round(float(point["x_nm"]))) + dx, int(round(float(point["y_nm"]))) + dy
        closeups.append(CloseUp(crop_box(cx, cy, plan.canvas), (cx, cy)))
    wanted: dict[tuple[int, ...], Mapping[str, Any]] = {}
    for tile in tiles:
        x0, y0, x1, y1 = (int(v) for v in tile["core_nm"])
        wanted[(x0 + dx, y0 + dy, x1 + dx, y1 + dy)] = tile
    out.mkdir(parents=True, exist_ok=True)
    result = StreamedPictures([], [], [])
    markers: list[tuple[float, float]] = []
    root = Path(tile_dir) if tile_dir is not None else None
    for t in plan.tiles:
        cx0, cy0, cx1, cy1 = t.core
        origin = (cx0, cy0)
        tgt = core_raster(tindex, fill, plan.shift, t)
        msk = digests.core(t)
        digests.of(t, msk)
        asked = wanted.get(tuple(t.core))
        te = record_eval(root, plan, t, digests, model, window, tgt, asked)
        if te is not None:
            result.from_records.append(t.tile_id)
        elif not tgt.any() and not msk.any() and not _window_has_mask(mindex, plan, t):
            te = TileEval(t.tile_id, tgt.astype(bool), {c: np.zeros(tgt.shape, dtype=bool) for c in CORNERS}, [], 0,
                          np.zeros(0, dtype=np.int64))  # nothing in the window prints: no simulation needed
        else:
            te = _simulate(model, plan, t, tindex, mindex, fill, window)
            result.simulated.append(t.tile_id)
        markers.extend((float(r["x"]), float(r["y"])) for r in te.epe_records)
        for name, ov in overviews.items():
            ov.add(origin, _layers(name, tgt, msk, te.prints))
        if asked is not None or any(_meets(c.box, t.core) for c in closeups):
            both = rgb([(tgt, *BOTH[0]), (msk, *BOTH[1]), (te.prints["nominal"], *BOTH[2])], tgt.shape)
            for c in closeups:
                c.add(origin, both)
            if asked is not None:
                p = out / f"{tile_name(asked['tile_id'])}.png"
                save_picture(both, (0, 0, cy1 - cy0, cx1 - cx0), p, size=CROP_SIZE)
                result.written.append(p)
            del both
        del te, tgt, msk
    for name, ov in overviews.items():
        p = out / f"{name}.png"
        annotate(ov.image(), box, p, markers if name == "violations" else ())
        result.written.append(p)
    for i, c in enumerate(closeups):
        p = out / f"crop_{i:02d}.png"
        c.save(p)
        result.written.append(p)
    return result


def _meets(box: tuple[int, int, int, int], core: tuple[int, int, int, int]) -> bool:
    y0, x0, y1, x1 = box
    cx0, cy0, cx1, cy1 = core
    return cx0 < x1 and x0 < cx1 and cy0 < y1 and y0 < cy1


def _window_has_mask(index: PolygonIndex, plan: tiled.TilePlan, t: Tile) -> bool:
    """Whether any mask polygon reaches the tile's window (then its core can print light)."""
    ox, oy = t.origin
    lx, ly = ox - plan.shift[0], oy - plan.shift[1]
    return bool(index.within(lx, ly, lx + plan.clip, ly + plan.clip).polygons)
