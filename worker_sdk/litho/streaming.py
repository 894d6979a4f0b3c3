"""Streaming evaluation: rasterise, simulate and score a layout tile by tile.

The whole-canvas evaluation (`engine.evaluate` with tiling) stitches every
tile's print into canvas-sized arrays and scores them at the end: about 18.5
bytes per canvas pixel. Here each tile is rasterised from the polygons that
touch its window, simulated, and scored on its core at once; only counts and
records are kept, so the working memory is that of one tile whatever the
layout's size.

Scoring per tile:
- L2 and PVB count the core's pixels (the cores partition the canvas), so the
  totals are exactly the whole-canvas ones.
- EPE samples are taken on the tile's window and kept when they lie in the
  core. A sample is the whole-canvas sample whenever its edge segment lies
  inside the window (every segment shorter than the halo).
- Topology labels each core's target and prints and joins components across
  core boundaries with union-find (`topostream`): exactly the whole-canvas
  records, whatever the shapes' size.
- With `regions` (the detailed report), the L2 and PVB error regions are found
  per core and joined the same way (`topostream.RegionStitcher`): exactly the
  whole-canvas pieces and the boxes dedup groups them by.

The canvas frame and the tile plan are the whole-canvas evaluation's, so the
prints are bit-identical.
"""
from __future__ import annotations

import base64
import math
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from worker_sdk.cancel import NEVER, CancellationToken

from .engine import DEFAULT_HALO, ScoreViews, Tile, needs_tiling, plan_tiles, print_mask
from .layout import Layout, placement, rasterize
from .metrics import epe_check, epe_distances, epe_samples, pv_band
from .topostream import RegionStitcher, TopologyStitcher
from .process import DEFAULT, ProcessWindow

# a tiled canvas above this many pixels is evaluated streaming when the request does not say
STREAM_AUTO_PX = 64 * 1024 * 1024

MaskWindow = Callable[[Tile], np.ndarray]


@dataclass
class TileScore:
    tile_id: str
    l2: int
    pvb: int
    epe: int
    epe_samples: int


@dataclass
class StreamedEvaluation(ScoreViews):
    """What `engine.Evaluation` reports, without its canvas-sized arrays."""
    fill: str
    shift: tuple[int, int]
    canvas: tuple[int, int]  # height, width
    tiles: list[Tile]
    window: ProcessWindow = DEFAULT
    l2: int = 0
    pvb: int = 0
    pvb_grid: int | None = None
    epe_records: list[dict[str, Any]] = field(default_factory=list)
    epe_samples: int = 0
    epe_nm: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    topology: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    per_tile: list[TileScore] = field(default_factory=list)
    streamed: bool = True
    # "l2"/"pvb" -> the error regions' pieces per core, as `engine.region_records` (when asked for)
    regions: dict[str, list[dict[str, Any]]] | None = None


class PolygonIndex:
    """Polygons of a layout with their boxes, to pick the ones that touch a window."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        pts = [np.asarray(p, dtype=np.int64) for p in layout.polygons]
        self.boxes = (np.array([[p[:, 0].min(), p[:, 1].min(), p[:, 0].max(), p[:, 1].max()] for p in pts],
                               dtype=np.int64) if pts else np.zeros((0, 4), dtype=np.int64))

    def within(self, x0: int, y0: int, x1: int, y1: int) -> Layout:
        """The polygons whose box meets [x0, x1] x [y0, y1] (layout nm), as a layout."""
        b = self.boxes
        hit = np.flatnonzero((b[:, 2] >= x0) & (b[:, 0] <= x1) & (b[:, 3] >= y0) & (b[:, 1] <= y1))
        return Layout(tuple(self.layout.polygons[i] for i in hit), self.layout.source, self.layout.layer)


def canvas_plan(layout: Layout, clip: int, halo: int, fill: str) -> tuple[tuple[int, int], tuple[int, int], list[Tile]]:
    """(shift, (height, width) rounded up to whole cores, tiles): the whole-canvas evaluation's frame."""
    x0, y0, x1, y1 = layout.bbox()
    if needs_tiling(layout, clip):
        shift = (halo - x0, halo - y0)
        width, height = (x1 - x0) + 2 * halo, (y1 - y0) + 2 * halo
    else:
        shift = placement(layout, fill, clip)
        width = height = clip
    tiles = plan_tiles(width, height, clip, halo)
    core = clip - 2 * halo
    return shift, (math.ceil(height / core) * core, math.ceil(width / core) * core), tiles


def window_raster(index: PolygonIndex, fill: str, clip: int, shift: tuple[int, int], tile: Tile) -> np.ndarray:
    """The tile's clip x clip window of a layout (canvas px = layout nm + shift)."""
    ox, oy = tile.origin
    lx, ly = ox - shift[0], oy - shift[1]  # the window's corner in layout nm
    sub = index.within(lx - 2, ly - 2, lx + clip + 2, ly + clip + 2)
    if not sub.polygons:
        return np.zeros((clip, clip), dtype=np.uint8)
    return rasterize(sub, fill, size=clip, shift=(shift[0] - ox, shift[1] - oy))


def core_raster(index: PolygonIndex, fill: str, shift: tuple[int, int], tile: Tile) -> np.ndarray:
    """The tile's core of a layout alone (canvas px = layout nm + shift): the same bits as the core of
    `window_raster`, at a quarter of its pixels. Rasterised with a 1 px rim, which the lithobench
    fill's one-pixel reach needs."""
    x0, y0, x1, y1 = tile.core
    n = max(x1 - x0, y1 - y0) + 2
    lx, ly = x0 - 1 - shift[0], y0 - 1 - shift[1]  # the rim's corner in layout nm
    sub = index.within(lx - 2, ly - 2, lx + n + 2, ly + n + 2)
    if not sub.polygons:
        return np.zeros((y1 - y0, x1 - x0), dtype=np.uint8)
    img = rasterize(sub, fill, size=n, shift=(shift[0] - x0 + 1, shift[1] - y0 + 1))
    return img[1:1 + y1 - y0, 1:1 + x1 - x0]


@dataclass
class TileEval:
    """One tile's share of a streamed evaluation, cut to its core: the target, every simulated
    corner's print, and the EPE records of the samples in the core (taken on the whole window,
    so they are the whole-canvas samples). What `EvalFold` sums, whether the tile was simulated
    just now or by another task (`tile_eval_record` / `tile_eval_from_record`)."""
    tile_id: str
    target: np.ndarray  # bool, core
    prints: dict[str, np.ndarray]  # corner -> bool, core
    epe_records: list[dict[str, Any]]  # canvas px
    epe_samples: int
    epe_nm: np.ndarray


def tile_eval(model, t: Tile, tgt: np.ndarray, msk: np.ndarray, *, window: ProcessWindow = DEFAULT,
              token: CancellationToken = NEVER) -> tuple[TileEval, dict[str, np.ndarray]]:
    """Simulate one tile's window of `msk` and keep what the evaluation needs of its core; also
    returns the window's prints (corner -> bool [clip, clip])."""
    z = print_mask(model, msk, token=token, window=window)  # per corner inside
    token.check()
    ox, oy = t.origin
    ys, xs = _core_slices(t)
    nominal = z["nominal"]
    samples = [s for s in epe_samples(tgt) if ys.start <= s.y < ys.stop and xs.start <= s.x < xs.stop]
    recs = epe_check(samples, nominal)
    for r in recs:
        r["x"], r["y"] = int(r["x"]) + ox, int(r["y"]) + oy
        r["normal"] = [int(v) for v in r["normal"]]
    te = TileEval(t.tile_id, np.asarray(tgt[ys, xs], dtype=bool), {k: np.asarray(v[ys, xs], dtype=bool) for k, v in z.items()},
                  recs, len(samples), epe_distances(samples, nominal))
    return te, z


class EvalFold:
    """Sums tiles' evaluations into one StreamedEvaluation; `add` them in the plan's row-major
    order (the topology joins need it), then `finish()`. The cores partition the canvas, so
    the counts are exact; the topology and, with `regions`, the L2 and PVB error regions (what
    the detailed report lists) are joined across cores (`topostream`)."""

    def __init__(self, layout_frame: tuple[tuple[int, int], tuple[int, int], list[Tile]], fill: str,
                 window: ProcessWindow = DEFAULT, regions: bool = False) -> None:
        shift, canvas, tiles = layout_frame
        self.ev = StreamedEvaluation(fill, shift, canvas, tiles, window)
        self.stitcher = TopologyStitcher(tuple(c.name for c in window.corners))
        self.regions = {"l2": RegionStitcher(), "pvb": RegionStitcher()} if regions else None
        self.grid_px = 0
        self.epe_nm: list[np.ndarray] = []

    def add(self, t: Tile, te: TileEval) -> TileScore:
        ev = self.ev
        l2_err = te.prints["nominal"] != te.target
        pvb_err = pv_band(te.prints, ev.window.pvb_names)
        l2, pvb = int(np.count_nonzero(l2_err)), int(np.count_nonzero(pvb_err))
        if self.regions is not None:
            self.regions["l2"].add(t, l2_err)
            self.regions["pvb"].add(t, pvb_err)
        del l2_err, pvb_err
        ev.l2 += l2
        ev.pvb += pvb
        if ev.window.grid:
            self.grid_px += int(np.count_nonzero(pv_band(te.prints, ev.window.grid_names)))
        ev.epe_records.extend(dict(r) for r in te.epe_records)
        ev.epe_samples += te.epe_samples
        self.epe_nm.append(np.asarray(te.epe_nm, dtype=np.int64))
        self.stitcher.add(t.row, t.col, (t.core[0], t.core[1]), te.target.astype(np.uint8),
                          {c.name: te.prints[c.name] for c in ev.window.corners})
        score = TileScore(t.tile_id, l2, pvb, len(te.epe_records), te.epe_samples)
        ev.per_tile.append(score)
        return score

    def finish(self, token: CancellationToken = NEVER) -> StreamedEvaluation:
        ev = self.ev
        for c in ev.window.corners:
            token.check()
            ev.topology[c.name] = self.stitcher.finish(c.name)
        ev.epe_nm = np.concatenate(self.epe_nm) if self.epe_nm else np.zeros(0, dtype=np.int64)
        if ev.window.grid:
            ev.pvb_grid = self.grid_px
        if self.regions is not None:
            ev.regions = {k: r.finish() for k, r in self.regions.items()}
        return ev


def tile_scores(ev: StreamedEvaluation) -> list[dict[str, Any]]:
    """Each tile's core (layout nm) with its L2, PVB and EPE markers: the per-tile figures of a
    streamed evaluation, as a stitched report states them (and litho.resim reproduces them). Pure."""
    dx, dy = ev.shift
    tiles = {t.tile_id: t for t in ev.tiles}
    out = []
    for s in ev.per_tile:
        t = tiles[s.tile_id]
        x0, y0, x1, y1 = t.core
        out.append({"tile_id": s.tile_id, "row": t.row, "col": t.col, "core_nm": [x0 - dx, y0 - dy, x1 - dx, y1 - dy],
                    "l2_nm2": s.l2, "pvb_nm2": s.pvb, "epe_violations": s.epe})
    return out


def pack_bits(img: np.ndarray) -> str:
    """A boolean array's bits, packed, deflated and base64'd (its shape is the reader's to know):
    how tile evaluations and seam windows keep their prints in JSON, losslessly."""
    packed = np.packbits(np.asarray(img, dtype=bool), axis=None).tobytes()
    return base64.b64encode(zlib.compress(packed, 6)).decode("ascii")


def unpack_bits(text: str, shape: tuple[int, ...]) -> np.ndarray:
    """`pack_bits` undone: a bool array of `shape`."""
    raw = np.frombuffer(zlib.decompress(base64.b64decode(text)), dtype=np.uint8)
    return np.unpackbits(raw, count=int(np.prod(shape))).reshape(shape).astype(bool)


def tile_eval_record(te: TileEval) -> dict[str, Any]:
    """A tile's evaluation as JSON-ready data (bit-packed cores): lossless, so the sums made from
    records are those made from the simulation itself."""
    return {"tile_id": te.tile_id, "shape": list(te.target.shape), "target": pack_bits(te.target),
            "prints": {k: pack_bits(v) for k, v in sorted(te.prints.items())}, "epe_records": te.epe_records,
            "epe_samples": int(te.epe_samples), "epe_nm": [int(v) for v in te.epe_nm]}


def tile_eval_from_record(rec: dict[str, Any]) -> TileEval:
    shape = (int(rec["shape"][0]), int(rec["shape"][1]))
    return TileEval(rec["tile_id"], unpack_bits(rec["target"], shape),
                    {k: unpack_bits(v, shape) for k, v in rec["prints"].items()}, list(rec["epe_records"]),
                    int(rec["epe_samples"]), np.asarray(rec["epe_nm"], dtype=np.int64))


def evaluate_streaming(model, layout: Layout, *, mask_layout: Layout | None = None,
                       mask_window: MaskWindow | None = None, fill: str = "lithobench", halo: int = DEFAULT_HALO,
                       window: ProcessWindow = DEFAULT,
                       token: CancellationToken = NEVER,
                       on_tile: Callable[[int, int], None] | None = None,
                       on_print: Callable[[Tile, dict[str, np.ndarray]], None] | None = None,
                       done: Callable[[Tile], TileEval | None] | None = None,
                       regions: bool = False) -> StreamedEvaluation:
    """Evaluate a mask for `layout` one tile at a time. The mask is `mask_window(tile)` (a clip x clip
    raster of the tile's window), else `mask_layout`'s geometry (exact fill), else the target.
    `done(tile)` may give a tile's evaluation made elsewhere (another task simulated that very
    window): it is summed as it is, not simulated again. `on_print(tile, prints)` gets each
    tile's core prints (corner -> bool core). `regions`: also the L2 and PVB error regions, so
    the detailed report (violations) can be made without a canvas."""
    clip = model.size
    frame = canvas_plan(layout, clip, halo, fill)
    shift, _canvas, tiles = frame
    tindex = PolygonIndex(layout)
    mindex = PolygonIndex(mask_layout) if mask_layout is not None else None
    fold = EvalFold(frame, fill, window, regions)
    for i, t in enumerate(tiles):
        token.check()  # per tile
        te = done(t) if done is not None else None
        if te is None:
            tgt = window_raster(tindex, fill, clip, shift, t)
            if mask_window is not None:
                msk = mask_window(t)
            elif mindex is not None:
                msk = window_raster(mindex, "exact", clip, shift, t)
            else:
                msk = tgt
            te, z = tile_eval(model, t, tgt, msk, window=window, token=token)
            del tgt, msk, z
        fold.add(t, te)
        if on_print is not None:
            on_print(t, te.prints)
        del te
        if on_tile is not None:
            on_tile(i + 1, len(tiles))
    return fold.finish(token)


def _core_slices(t: Tile) -> tuple[slice, slice]:
    ox, oy = t.origin
    x0, y0, x1, y1 = t.core
    return slice(y0 - oy, y1 - oy), slice(x0 - ox, x1 - ox)


def wants_streaming(request_value: bool | None, layout: Layout, clip: int, halo: int, fill: str) -> bool:
    """The request's choice, else streaming for tiled canvases above STREAM_AUTO_PX pixels."""
    if request_value is not None:
        return bool(request_value)
    if not needs_tiling(layout, clip):
        return False
    _, (h, w), _ = canvas_plan(layout, clip, halo, fill)
    return h * w > STREAM_AUTO_PX


def sorted_records(ev: Any) -> dict[str, Any]:
    """Order-free view of an evaluation's records (to compare streaming with whole-canvas)."""
    def key(r: dict[str, Any]) -> tuple:
        return (r["y"], r["x"], r.get("kind", ""))

    strip = lambda r: {k: v for k, v in r.items() if k not in ("tile_id", "target_components", "print_components")}
    return {"epe": sorted((strip(r) for r in ev.epe_records), key=key),
            "topology": {c: sorted((strip(r) for r in recs), key=key) for c, recs in ev.topology.items()}}

