"""Tiled ILT over a layout larger than one clip: plan, per-tile optimisation, stitching, seam check.

Plan. The canvas frame is the tiled evaluation's (layout nm + shift, a halo
of margin around the layout's box). Tiles are clip-sized windows (the
model's canvas, 2048 px) whose cores (clip - 2 * halo) partition the canvas.
The halo is the optical radius, the Chebyshev radius that holds 99% of the
kernels' weighted spatial energy, rounded up to 64 px (512 px for the ICCAD
2013 kernels), so a core's print depends only on mask pixels in its window.

Overlap policy ("frozen-neighbours"). A tile optimises the mask in its core
only; its halo holds the finished cores of its neighbours, frozen, and the
target where a neighbour is not finished yet. The loss counts the print in
the core and in a margin of half a halo around it, so a tile also answers
for its effect on its finished neighbours. Tiles run in four parity waves
(row % 2, column % 2): no two tiles of a wave are neighbours (diagonals
included), so a wave's tiles are independent and can run at once: one task
optimises the tiles it holds of a wave as one [B, N, N] batch (iltbatch),
as many at a time as the memory budget allows.

Stitching. The raw binary cores are cleaned (the ILT clean-up, then the
request's mask rules) tile by tile on a window assembled from the raw cores
around it, keeping the core: every rule reaches less than a halo, so this
is the clean-up of the whole stitched mask, without seams and without
assist features cut at a core boundary.

Seam check. Windows centred on the seam crossings (the plan shifted by half
a core) re-simulate the stitched mask and compare, in a band around every
seam, their prints with the tiles' own prints and the cleaned mask with the
clean-up of the seam window. The mask must be identical. The prints differ
only where the optical energy beyond the halo (1%) moves an edge: the check
counts the pixels that differ and those inside a 2 x 2 block of difference,
and fails when the latter exceed 0.1% of the seam band.

Tile folder (resume). Each finished core is a file (`raw/T_r_c.npy`, bit
packed, with `raw/T_r_c.json` holding its digest); `plan.json` pins the plan,
the layout and the ILT settings. A run given the same folder skips every
tile already there; a folder of another plan or layout is refused.
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from registry.canonical import digest_bytes, digest_json
from worker_sdk.cancel import NEVER, CancellationToken

from .engine import Tile
from .errors import BadRequest
from .layout import Layout, raster_to_region
from .streaming import (PolygonIndex, canvas_plan, pack_bits, tile_eval, tile_eval_record, unpack_bits,
                        window_raster)

OVERLAP_POLICY = "frozen-neighbours"
RADIUS_ENERGY = 0.99
HALO_QUANTUM = 64
PLAN_VERSION = 1


RADIUS_STEP = 8  # px between the spatial samples the radius is measured on


def optical_radius(model, energy: float = RADIUS_ENERGY) -> int:
    """Chebyshev radius (px, to RADIUS_STEP) holding `energy` of the weighted spatial energy of
    every kernel set. The kernels are band-limited (|f| <= h cycles per canvas), so their fields are
    sampled without aliasing every RADIUS_STEP px by a small inverse FFT of the (2h+1)^2 block."""
    import torch

    from . import fftsafe

    g = model.size // RADIUS_STEP
    h = model.h
    worst = 0
    for name in model.kernel_names:
        k = model._kernels[name].to(torch.complex128).cpu()
        w = model._weights[name].to(torch.float64).cpu()
        idx = torch.arange(-h, h + 1) % g
        full = torch.zeros((k.shape[0], g, g), dtype=torch.complex128)
        full[:, idx[:, None], idx[None, :]] = k
        field = fftsafe.ifft2_unnorm(full)  # unnormalised (see fftsafe); the scale cancels below
        e = torch.fft.fftshift((w[:, None, None] * (field.real ** 2 + field.imag ** 2)).sum(0))
        yy, xx = torch.meshgrid(torch.arange(g), torch.arange(g), indexing="ij")
        r = torch.maximum((yy - g // 2).abs(), (xx - g // 2).abs()).reshape(-1)
        per = torch.zeros(g, dtype=torch.float64).index_add_(0, r, e.reshape(-1))
        frac = torch.cumsum(per, 0) / per.sum()
        worst = max(worst, int(torch.searchsorted(frac, torch.tensor(energy, dtype=torch.float64))) * RADIUS_STEP)
    return worst


_RADIUS: dict[tuple, int] = {}


def halo_for(model, energy: float = RADIUS_ENERGY, quantum: int = HALO_QUANTUM) -> tuple[int, int]:
    """(halo, optical radius): the radius rounded up to `quantum` px (cached per model)."""
    key = (tuple(sorted(model.digests.items())), model.size, energy)
    if key not in _RADIUS:
        _RADIUS[key] = optical_radius(model, energy)
    r = _RADIUS[key]
    return int(math.ceil(r / quantum) * quantum), r


@dataclass(frozen=True)
class TilePlan:
    clip: int
    halo: int
    radius: int
    shift: tuple[int, int]  # canvas px = layout nm + shift
    canvas: tuple[int, int]  # height, width (whole cores)
    fill: str
    tiles: tuple[Tile, ...]

    @property
    def core(self) -> int:
        return self.clip - 2 * self.halo

    @property
    def rows(self) -> int:
        return self.canvas[0] // self.core

    @property
    def cols(self) -> int:
        return self.canvas[1] // self.core

    def tile(self, tile_id: str) -> Tile:
        for t in self.tiles:
            if t.tile_id == tile_id:
                return t
        raise BadRequest(f"no tile {tile_id!r} in the plan", code="LITHO_UNKNOWN_TILE",
                         details={"tile_id": tile_id, "rows": self.rows, "cols": self.cols})

    @staticmethod
    def wave_of(t: Tile) -> int:
        return (t.row % 2) * 2 + (t.col % 2)

    def waves(self) -> list[list[Tile]]:
        """Four parity waves in order; no two tiles of one wave touch, diagonals included."""
        out: list[list[Tile]] = [[] for _ in range(4)]
        for t in self.tiles:
            out[self.wave_of(t)].append(t)
        return [w for w in out if w]

    def neighbours(self, t: Tile) -> list[Tile]:
        return [u for u in self.tiles if u is not t and abs(u.row - t.row) <= 1 and abs(u.col - t.col) <= 1]

    def describe(self) -> dict[str, Any]:
        return {"version": PLAN_VERSION, "clip_px": self.clip, "halo_px": self.halo, "core_px": self.core,
                "optical_radius_px": self.radius, "radius_energy": RADIUS_ENERGY, "overlap": OVERLAP_POLICY,
                "shift": list(self.shift), "canvas_px": list(self.canvas), "rows": self.rows, "cols": self.cols,
                "tiles": len(self.tiles), "waves": [[t.tile_id for t in w] for w in self.waves()], "fill": self.fill}


def plan_layout(layout: Layout, model, fill: str = "lithobench", halo: int | None = None) -> TilePlan:
    """The tile plan of a layout for a model (halo from the optical radius unless given)."""
    auto, radius = halo_for(model)
    halo = auto if halo is None else int(halo)
    if halo % 8 or halo < radius // 2 or model.size - 2 * halo < 256:
        raise BadRequest("halo must be a multiple of 8 px, at least half the optical radius, and leave a core of "
                         "256 px or more", code="LITHO_BAD_TILE_PLAN",
                         details={"halo_px": halo, "optical_radius_px": radius, "clip_px": model.size})
    shift, canvas, tiles = canvas_plan(layout, model.size, halo, fill)  # the tiled evaluation's frame
    return TilePlan(model.size, halo, radius, shift, canvas, fill, tuple(tiles))


def _core_slices(t: Tile) -> tuple[slice, slice]:
    ox, oy = t.origin
    x0, y0, x1, y1 = t.core
    return slice(y0 - oy, y1 - oy), slice(x0 - ox, x1 - ox)


class TileStore:
    """A folder of finished cores: `<kind>/<tile>.npy` (bit-packed uint8) + `<kind>/<tile>.json`."""

    def __init__(self, root: Path | str, pin: dict[str, Any]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        pf = self.root / "plan.json"
        if pf.exists():
            have = json.loads(pf.read_text())
            if have != pin:
                diff = sorted(k for k in set(have) | set(pin) if have.get(k) != pin.get(k))
                raise BadRequest("the tile folder holds another plan, layout or ILT setting", code="LITHO_TILE_PLAN_MISMATCH",
                                 details={"tile_dir": str(self.root), "differs": diff},
                                 hints=["use a fresh tile_dir, or the request that made this one"])
        else:
            _atomic_write(pf, (json.dumps(pin, sort_keys=True, indent=1) + "\n").encode())

    @classmethod
    def existing(cls, root: Path | str) -> "TileStore":
        """A folder made earlier, opened to read its records (no plan check, nothing written)."""
        store = cls.__new__(cls)
        store.root = Path(root)
        return store

    def _paths(self, kind: str, tile_id: str) -> tuple[Path, Path]:
        return self.root / kind / f"{tile_id}.npy", self.root / kind / f"{tile_id}.json"

    def info(self, kind: str, tile_id: str) -> dict[str, Any] | None:
        """The tile's record when its core file is complete and matches it, else None."""
        data, meta = self._paths(kind, tile_id)
        if not (data.is_file() and meta.is_file()):
            return None
        try:
            rec = json.loads(meta.read_text())
        except json.JSONDecodeError:
            return None
        return rec if rec.get("digest") == digest_bytes(data.read_bytes()) else None

    def save(self, kind: str, tile_id: str, core: np.ndarray, info: dict[str, Any]) -> dict[str, Any]:
        data, meta = self._paths(kind, tile_id)
        data.parent.mkdir(parents=True, exist_ok=True)
        raw = _pack(core)
        _atomic_write(data, raw)
        rec = {**info, "tile_id": tile_id, "shape": list(core.shape), "digest": digest_bytes(raw)}
        _atomic_write(meta, (json.dumps(rec, sort_keys=True) + "\n").encode())
        return rec

    def raw_bytes(self, kind: str, tile_id: str) -> bytes:
        return self._paths(kind, tile_id)[0].read_bytes()

    def put_raw(self, kind: str, tile_id: str, data: bytes, rec: dict[str, Any]) -> None:
        """Store a core's bytes and record exactly as `save` wrote them elsewhere (digest checked)."""
        if rec.get("digest") != digest_bytes(data) or rec.get("tile_id") != tile_id:
            raise BadRequest("tile bytes do not match their record", code="LITHO_TILE_RESUME_REFUSED")
        path, meta = self._paths(kind, tile_id)
        _atomic_write(path, data)
        _atomic_write(meta, (json.dumps(rec, sort_keys=True) + "\n").encode())

    def load(self, kind: str, tile_id: str) -> np.ndarray | None:
        rec = self.info(kind, tile_id)
        if rec is None:
            return None
        data, _ = self._paths(kind, tile_id)
        return _unpack(data.read_bytes(), tuple(rec["shape"]))

    def window(self, kind: str, plan: TilePlan, t: Tile, fallback: np.ndarray) -> np.ndarray:
        """The tile's window with every stored core of `kind` around it pasted in; `fallback` elsewhere."""
        win = np.array(fallback, dtype=np.uint8, copy=True)
        ox, oy = t.origin
        for u in [t, *plan.neighbours(t)]:
            core = self.load(kind, u.tile_id)
            if core is None:
                continue
            x0, y0, x1, y1 = u.core
            wx0, wy0 = max(x0, ox), max(y0, oy)
            wx1, wy1 = min(x1, ox + plan.clip), min(y1, oy + plan.clip)
            if wx0 < wx1 and wy0 < wy1:
                win[wy0 - oy:wy1 - oy, wx0 - ox:wx1 - ox] = core[wy0 - y0:wy1 - y0, wx0 - x0:wx1 - x0]
        return win


def _pack(core: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, np.packbits(np.asarray(core, dtype=bool), axis=None), allow_pickle=False)
    return buf.getvalue()


def _unpack(raw: bytes, shape: tuple[int, ...]) -> np.ndarray:
    import io

    bits = np.load(io.BytesIO(raw), allow_pickle=False)
    return np.unpackbits(bits, count=int(np.prod(shape))).reshape(shape).astype(np.uint8)


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def store_pin(plan: TilePlan, layout: Layout, cfg, rules: dict[str, Any] | None, window) -> dict[str, Any]:
    """What a tile folder is bound to: the plan, the layout's polygons, the ILT and mask-rule settings."""
    import dataclasses

    return {"plan": digest_json(plan.describe()), "layout": layout.digest(),
            "ilt": digest_json(json.loads(json.dumps(dataclasses.asdict(cfg)))), "mrc": dict(rules or {}),
            "window": window.name, "tiles": len(plan.tiles)}


# ----- per-tile ILT --------------------------------------------------------------------------------

def tile_problem(plan: TilePlan, store: TileStore, index: PolygonIndex, t: Tile
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(target, fixed, free, weight) of one tile's ILT: its core free, the finished neighbours
    frozen in its halo (the target where none is finished), the print counted in the core and
    half a halo around it. None when nothing prints anywhere in the window."""
    tgt = window_raster(index, plan.fill, plan.clip, plan.shift, t)
    if not tgt.any():
        return None
    ys, xs = _core_slices(t)
    fixed = store.window("raw", plan, t, tgt)
    free = np.zeros_like(tgt)
    free[ys, xs] = 1
    m = plan.halo // 2
    weight = np.zeros_like(tgt)
    weight[max(0, ys.start - m):ys.stop + m, max(0, xs.start - m):xs.stop + m] = 1
    return tgt, fixed, free, weight


def optimize_batch(model, plan: TilePlan, store: TileStore, index: PolygonIndex, tiles: Sequence[Tile], cfg, *,
                   corners, token: CancellationToken = NEVER,
                   on_tile: Callable[[Tile, dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """ILT of tiles of one wave (no two are neighbours) as one [B, N, N] batch (iltbatch); each
    raw core is stored, and `on_tile` told, as soon as the batch ends. A tile with nothing to
    print keeps a clear core without ILT."""
    from .iltbatch import optimize_masks

    t0 = time.perf_counter()
    out: list[dict[str, Any]] = []
    work: list[tuple[Tile, tuple]] = []
    for t in tiles:
        prob = tile_problem(plan, store, index, t)
        if prob is None:
            core = np.zeros((plan.core, plan.core), dtype=np.uint8)
            rec = store.save("raw", t.tile_id, core, {"wave": plan.wave_of(t), "iterations": 0, "final_loss": 0.0,
                                                      "seconds": round(time.perf_counter() - t0, 3), "empty": True})
            out.append(rec)
            if on_tile is not None:
                on_tile(t, rec)
        else:
            work.append((t, prob))
    if not work:
        return out
    res = optimize_masks(model, [p[0] for _, p in work], cfg, token=token, corners=corners,
                         inits=[p[1] for _, p in work], fixeds=[p[1] for _, p in work],
                         frees=[p[2] for _, p in work], weights=[p[3] for _, p in work], clean=False)
    secs = round(time.perf_counter() - t0, 3)
    for (t, _), r in zip(work, res):
        ys, xs = _core_slices(t)
        rec = store.save("raw", t.tile_id, r.mask[ys, xs], {
            "wave": plan.wave_of(t), "iterations": r.iterations,
            "final_loss": r.loss_history[-1] if r.loss_history else None, "seconds": secs, "batch": len(work)})
        out.append(rec)
        if on_tile is not None:
            on_tile(t, rec)
    return out


def optimize_tiles(model, plan: TilePlan, store: TileStore, index: PolygonIndex, cfg, *, corners,
                   only: Sequence[str] | None = None, token: CancellationToken = NEVER,
                   on_tile: Callable[[str, dict[str, Any], bool], None] | None = None,
                   batch: int | None = None) -> list[dict[str, Any]]:
    """Every tile (or the `only` ones), wave by wave; tiles already in the folder are not redone.
    The tiles to run of one wave are optimised `batch` at a time as one [B, N, N] stack (default:
    as many as the memory budget allows, `iltbatch.ilt_masks_per_batch`)."""
    from .iltbatch import ilt_masks_per_batch

    wanted = set(only) if only is not None else None
    if wanted is not None:
        for tid in wanted:
            plan.tile(tid)  # unknown ids are refused before any work
    per = max(1, int(batch)) if batch else ilt_masks_per_batch(model)
    done: list[dict[str, Any]] = []

    def fresh(t: Tile, rec: dict[str, Any]) -> None:
        done.append({**rec, "resumed": False})
        if on_tile is not None:
            on_tile(t.tile_id, rec, False)

    for wave in plan.waves():
        todo: list[Tile] = []
        for t in wave:
            if wanted is not None and t.tile_id not in wanted:
                continue
            token.check()
            rec = store.info("raw", t.tile_id)
            if rec is None:
                todo.append(t)
                continue
            done.append({**rec, "resumed": True})
            if on_tile is not None:
                on_tile(t.tile_id, rec, True)
        for lo in range(0, len(todo), per):
            token.check()
            optimize_batch(model, plan, store, index, todo[lo:lo + per], cfg, corners=corners, token=token,
                           on_tile=fresh)
    return done


def missing(plan: TilePlan, store: TileStore, kind: str = "raw") -> list[str]:
    return [t.tile_id for t in plan.tiles if store.info(kind, t.tile_id) is None]


# ----- stitching ---------------------------------------------------------------------------------

CLEAN_MARGIN_PX = 128  # what the clean-up reads around a pixel, with room to spare (rules reach < 64 px)


def _clean_core(raw: np.ndarray, tgt: np.ndarray, cfg, rules, box: tuple[slice, slice]) -> np.ndarray:
    """The clean-up of the window's `box`, computed on the box plus CLEAN_MARGIN_PX around it."""
    ys, xs = box
    m = CLEAN_MARGIN_PX
    n = raw.shape[0]
    y0, y1, x0, x1 = max(0, ys.start - m), min(n, ys.stop + m), max(0, xs.start - m), min(n, xs.stop + m)
    near = _near(tgt, rules.halo_px)[y0:y1, x0:x1] if rules is not None and rules.halo_px else None
    out = _clean_window(raw[y0:y1, x0:x1], tgt[y0:y1, x0:x1], cfg, rules, near)
    return out[ys.start - y0:ys.stop - y0, xs.start - x0:xs.stop - x0]


def _clean_window(raw: np.ndarray, tgt: np.ndarray, cfg, rules, near: np.ndarray | None = None) -> np.ndarray:
    """The clean-up of a window. Every step is local (it reaches less than a halo), so the core of
    the result is that of the whole stitched mask. The rules' clearing of material far from the
    target is local here too: farther than halo_px from any target pixel (not from a bounding box,
    which would depend on the window)."""
    import dataclasses

    import torch

    from .ilt import cleanup
    from .mrc import clean_mask

    out = cleanup(raw, cfg.min_feature_nm, cfg.min_area_nm2)
    if rules is not None:
        t = torch.from_numpy(tgt.astype(np.float32))
        if rules.halo_px:
            out = out * (near if near is not None else _near(tgt, rules.halo_px))
        local = dataclasses.replace(rules, halo_px=max(raw.shape))
        out = clean_mask(torch.from_numpy(out.astype(np.float32)), t, local).numpy().astype(np.uint8)
    return out


def _near(img: np.ndarray, r: int) -> np.ndarray:
    """uint8: 1 where some set pixel of img lies within r px (Chebyshev), from an integral image."""
    n, m = img.shape
    c = np.zeros((n + 1, m + 1), dtype=np.int64)
    c[1:, 1:] = np.cumsum(np.cumsum(img.astype(bool), 0), 1)
    y0 = np.clip(np.arange(n) - r, 0, n)
    y1 = np.clip(np.arange(n) + r + 1, 0, n)
    x0 = np.clip(np.arange(m) - r, 0, m)
    x1 = np.clip(np.arange(m) + r + 1, 0, m)
    box = c[y1][:, x1] - c[y0][:, x1] - c[y1][:, x0] + c[y0][:, x0]
    return (box > 0).astype(np.uint8)


def clean_tiles(plan: TilePlan, store: TileStore, index: PolygonIndex, cfg, rules, tile_ids: Sequence[str], *,
                token: CancellationToken = NEVER) -> list[str]:
    """Clean the raw cores of `tile_ids` (each on the window of raw cores around it) and store the
    clean cores; returns the tiles cleaned now. A tile's clean core reads only its own and its
    neighbours' raw cores, so a tile task cleans as soon as those are in its folder, in the waves,
    and the bytes are those a clean-up of the whole block gives."""
    tiles = [plan.tile(tid) for tid in tile_ids]
    need = {u.tile_id for t in tiles for u in (t, *plan.neighbours(t))}
    lost = [tid for tid in sorted(need) if store.info("raw", tid) is None]
    if lost:
        raise BadRequest(f"{len(lost)} tile(s) not optimised yet", code="LITHO_TILES_MISSING",
                         details={"tiles": lost[:50], "count": len(lost)}, hints=["run the missing tiles first"])
    zero = np.zeros((plan.clip, plan.clip), dtype=np.uint8)
    done = []
    for t in tiles:
        token.check()
        if store.info("clean", t.tile_id) is not None:
            continue
        raw = store.window("raw", plan, t, zero)
        tgt = window_raster(index, plan.fill, plan.clip, plan.shift, t)
        ys, xs = _core_slices(t)
        store.save("clean", t.tile_id, _clean_core(raw, tgt, cfg, rules, (ys, xs)), {"wave": plan.wave_of(t)})
        done.append(t.tile_id)
    return done


def stitch(plan: TilePlan, store: TileStore, index: PolygonIndex, cfg, rules, *,
           token: CancellationToken = NEVER) -> list[str]:
    """Clean every raw core not cleaned yet; returns the tiles cleaned here (none when the tile
    tasks cleaned them in the waves)."""
    return clean_tiles(plan, store, index, cfg, rules, [t.tile_id for t in plan.tiles], token=token)


def mask_window(plan: TilePlan, store: TileStore, kind: str = "clean") -> Callable[[Tile], np.ndarray]:
    """A window source for the streaming evaluation: the stored cores of `kind` around a tile."""
    zero = np.zeros((plan.clip, plan.clip), dtype=np.uint8)
    return lambda t: store.window(kind, plan, t, zero)


def write_mask(plan: TilePlan, store: TileStore, out: Path, layer: tuple[int, int] = (1, 0), cell: str = "MASK") -> int:
    """The stitched clean mask as polygons (layout nm), core by core, merged across seams."""
    import klayout.db as kdb

    ly = kdb.Layout()
    ly.dbu = 0.001
    top = ly.create_cell(cell)
    region = kdb.Region()
    for t in plan.tiles:
        core = store.load("clean", t.tile_id)
        if core is None or not core.any():
            continue
        region.insert(raster_to_region(core, (plan.shift[0] - t.core[0], plan.shift[1] - t.core[1])))
    region.merge()
    top.shapes(ly.layer(kdb.LayerInfo(*layer))).insert(region)
    opts = kdb.SaveLayoutOptions()
    opts.format = "OASIS" if out.suffix.lower() == ".oas" else "GDS2"
    out.parent.mkdir(parents=True, exist_ok=True)
    ly.write(str(out), opts)
    return region.count()


# ----- seam check --------------------------------------------------------------------------------

SEAM_BAND_PX = 32
SEAM_THICK_LIMIT = 0.001  # print disagreement beyond edge jitter allowed, as a share of the seam band


def seam_windows(plan: TilePlan) -> list[Tile]:
    """Windows centred on the seams: the plan's tiles shifted by half a core, one per seam crossing
    (one per seam when the plan is a single row or column)."""
    half = plan.core // 2
    out = []
    if len(plan.tiles) < 2:
        return out
    for t in plan.tiles:
        if (t.row + 1 >= plan.rows and plan.rows > 1) or (t.col + 1 >= plan.cols and plan.cols > 1):
            continue
        ox, oy = t.origin
        x0, y0, x1, y1 = t.core
        out.append(Tile(f"S_{t.row}_{t.col}", t.row, t.col, (ox + half, oy + half),
                        (x0 + half, y0 + half, x1 + half, y1 + half)))
    return out


class SeamBands:
    """The strips of `band` px along each core's edges of the tiles' prints (bit-packed): all the seam
    check compares, a few KiB per tile."""

    def __init__(self, band: int = SEAM_BAND_PX) -> None:
        self.band = band
        self.strips: dict[str, dict[str, list[tuple[tuple[slice, slice], bytes, tuple[int, int]]]]] = {}

    def keep(self, t: Tile, prints: dict[str, np.ndarray]) -> None:
        """Keep the strips of a tile's prints (each its core, or its whole window)."""
        ys, xs = _core_slices(t)
        size = (t.core[3] - t.core[1], t.core[2] - t.core[0])
        b = self.band
        per: dict[str, list] = {}
        for name, img in prints.items():
            core = np.asarray(img if img.shape == size else img[ys, xs], dtype=bool)
            h, w = core.shape
            parts = []
            for sl in ((slice(0, b), slice(0, w)), (slice(h - b, h), slice(0, w)),
                       (slice(0, h), slice(0, b)), (slice(0, h), slice(w - b, w))):
                piece = core[sl]
                parts.append((sl, np.packbits(piece, axis=None).tobytes(), piece.shape))
            per[name] = parts
        self.strips[t.tile_id] = per

    def paste(self, t: Tile, name: str, dst: np.ndarray, origin: tuple[int, int]) -> np.ndarray:
        """Write tile t's strips of corner `name` into `dst` (a window at canvas `origin`); returns
        the bool map of the pixels written."""
        wrote = np.zeros(dst.shape, dtype=bool)
        x0, y0 = t.core[0] - origin[0], t.core[1] - origin[1]
        n = dst.shape[0]
        for (ys, xs), raw, shape in self.strips[t.tile_id][name]:
            piece = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), count=shape[0] * shape[1]).reshape(shape)
            ry0, rx0 = y0 + ys.start, x0 + xs.start
            cy0, cx0 = max(ry0, 0), max(rx0, 0)
            cy1, cx1 = min(ry0 + shape[0], n), min(rx0 + shape[1], n)
            if cy0 < cy1 and cx0 < cx1:
                dst[cy0:cy1, cx0:cx1] = piece[cy0 - ry0:cy1 - ry0, cx0 - rx0:cx1 - rx0]
                wrote[cy0:cy1, cx0:cx1] = True
        return wrote


def seam_window(model, plan: TilePlan, store: TileStore, index: PolygonIndex, cfg, rules, s: Tile, *, window,
                band: int = SEAM_BAND_PX, token: CancellationToken = NEVER) -> dict[str, Any]:
    """The part of the seam check that needs only the seam window's own cores (raw and clean of the
    tiles it covers): its re-simulation and the clean-up of the window itself. Returns a record
    (JSON-ready): the mask and L2 counts in the seam bands, and the window's prints inside the
    bands, bit-packed; `seam_compare` sets them against the tiles' own prints. A task can make it
    as soon as those tiles are clean, in the waves."""
    from .engine import print_mask

    zero = np.zeros((plan.clip, plan.clip), dtype=np.uint8)
    need = [u.tile_id for u in seam_tiles(plan, s)]
    lost = [tid for tid in need if store.info("clean", tid) is None or store.info("raw", tid) is None]
    if lost:
        raise BadRequest(f"{len(lost)} tile(s) not cleaned yet for seam window {s.tile_id}", code="LITHO_TILES_MISSING",
                         details={"tiles": lost[:50], "count": len(lost), "seam": s.tile_id},
                         hints=["clean the tiles under the seam window first"])
    msk = store.window("clean", plan, s, zero)
    raw = store.window("raw", plan, s, zero)
    tgt = window_raster(index, plan.fill, plan.clip, plan.shift, s)
    z = print_mask(model, msk, window=window, token=token)
    sel = _seam_bands(plan, s, band)
    c0, c1 = plan.halo, plan.halo + plan.core
    box = (slice(c0 - band, c1 + band), slice(c0 - band, c1 + band))
    cleaned = np.zeros_like(msk)
    cleaned[box] = _clean_core(raw, tgt, cfg, rules, box)
    prints = {name: pack_bits(img.astype(bool)[sel]) for name, img in z.items()}
    return {"seam": s.tile_id, "band_px": band, "seam_px": int(sel.sum()),
            "mask_mismatch_px": int(np.count_nonzero((cleaned != msk) & sel)),
            "seam_l2_px": int(np.count_nonzero((z["nominal"] != tgt.astype(bool)) & sel)), "prints": prints}


def seam_tiles(plan: TilePlan, s: Tile) -> list[Tile]:
    """The tiles whose cores the seam window s covers (the 2 x 2 around its crossing when the halo
    is half a core): what its re-simulation reads."""
    ox, oy = s.origin
    n = plan.clip
    return [u for u in plan.tiles if u.core[0] < ox + n and ox < u.core[2] and u.core[1] < oy + n and oy < u.core[3]]


def _seam_bands(plan: TilePlan, s: Tile, band: int) -> np.ndarray:
    """The seam window's pixels within `band` px of a seam through its core."""
    ox, oy = s.origin
    core = plan.core
    sel = np.zeros((plan.clip, plan.clip), dtype=bool)
    sx, sy = (s.col + 1) * core - ox, (s.row + 1) * core - oy  # the seams through this window's core
    c0, c1 = plan.halo, plan.halo + core
    if s.col + 1 < plan.cols:
        sel[c0:c1, sx - band:sx + band] = True
    if s.row + 1 < plan.rows:
        sel[sy - band:sy + band, c0:c1] = True
    return sel


def seam_compare(plan: TilePlan, records: Sequence[dict[str, Any]], bands: SeamBands) -> dict[str, Any]:
    """The seam check's verdict from each window's record (`seam_window`) and the tiles' own prints
    (`bands`, kept while the stitched mask was evaluated). Pure arithmetic on stored bits."""
    by_id = {s.tile_id: s for s in seam_windows(plan)}
    checked = mismatch = thick = mask_mismatch = band_px = band_l2 = 0
    for rec in records:
        s = by_id[rec["seam"]]
        sel = _seam_bands(plan, s, bands.band)
        mask_mismatch += int(rec["mask_mismatch_px"])
        band_px += int(rec["seam_px"])
        band_l2 += int(rec["seam_l2_px"])
        near = [u for u in plan.tiles if u.row in (s.row, s.row + 1) and u.col in (s.col, s.col + 1)]
        n_sel = int(sel.sum())
        for name, packed in rec["prints"].items():
            img = np.zeros((plan.clip, plan.clip), dtype=bool)
            img[sel] = unpack_bits(packed, (n_sel,))
            theirs = np.zeros_like(img)
            covered = np.zeros_like(img)
            for u in near:
                covered |= bands.paste(u, name, theirs, s.origin)
            xor = (img != theirs) & sel & covered
            mismatch += int(np.count_nonzero(xor))
            thick += int(np.count_nonzero(xor[1:, 1:] & xor[:-1, 1:] & xor[1:, :-1] & xor[:-1, :-1]))
        checked += 1
    return {"windows": checked, "band_px": bands.band, "seam_px": band_px, "print_mismatch_px": mismatch,
            "print_mismatch_thick_px": thick, "mask_mismatch_px": mask_mismatch, "seam_l2_px": band_l2,
            "passed": mask_mismatch == 0 and thick <= SEAM_THICK_LIMIT * max(band_px, 1)}


def seam_records(store: TileStore) -> dict[str, dict[str, Any]]:
    """The seam windows' records a task already stored in the tile folder (`seams/<id>.json`)."""
    out = {}
    for p in sorted((store.root / "seams").glob("S_*.json")):
        out[p.stem] = json.loads(p.read_text())
    return out


def save_seam_record(store: TileStore, rec: dict[str, Any]) -> None:
    path = store.root / "seams" / f"{rec['seam']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(path, (json.dumps(rec, sort_keys=True) + "\n").encode())


def seam_check(model, plan: TilePlan, store: TileStore, index: PolygonIndex, cfg, rules, *, window,
               bands: SeamBands, token: CancellationToken = NEVER,
               done: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Re-simulate the stitched mask on windows centred on the seams and compare, in a band either
    side of every seam: the prints with the tiles' own prints (`bands`, kept while the tiles were
    evaluated), and the clean mask with the clean-up of the seam window itself. Windows whose
    record is in `done` (made in the waves) are not simulated again."""
    done = done or {}
    records = []
    for s in seam_windows(plan):
        token.check()
        rec = done.get(s.tile_id)
        if rec is None:
            rec = seam_window(model, plan, store, index, cfg, rules, s, window=window, band=bands.band, token=token)
        records.append(rec)
    out = seam_compare(plan, records, bands)
    out["windows_in_waves"] = sum(1 for s in seam_windows(plan) if s.tile_id in done)
    return out


# ----- evaluation in the waves -------------------------------------------------------------------
#
# A tile's evaluation simulates its own window (its core and a halo around it) of the final mask:
# the clean cores of the tile and its eight neighbours. It is exact, the very bits the serial
# evaluation of the stitched mask gives, as long as those nine cores are the assembled mask's;
# so each record names the digests of the cores it was simulated with, and the assembly uses a
# record only while every one of them is still the folder's clean core. The same holds for the
# target (the evaluation "before"), which depends on the layout alone.

def eval_cores(plan: TilePlan, t: Tile) -> list[str]:
    """The cores a tile's evaluation window reads: its own and its neighbours'."""
    return sorted(u.tile_id for u in (t, *plan.neighbours(t)))


def _model_key(model) -> str:
    return digest_json({"kernels": dict(sorted(model.digests.items())), "size": model.size, "dtype": str(model.dtype)})


def evaluate_tiles(model, plan: TilePlan, store: TileStore, index: PolygonIndex, tile_ids: Sequence[str], *,
                   window, token: CancellationToken = NEVER) -> list[str]:
    """Evaluate the clean mask and the target on each tile's own window and store the records
    (`evals/<tile>.json`); returns the tiles evaluated now. Refused (nothing written) while a
    core the windows read is not clean yet."""
    tiles = [plan.tile(tid) for tid in tile_ids]
    need = sorted({c for t in tiles for c in eval_cores(plan, t)})
    lost = [tid for tid in need if store.info("clean", tid) is None]
    if lost:
        raise BadRequest(f"{len(lost)} tile(s) not cleaned yet for the evaluation", code="LITHO_TILES_MISSING",
                         details={"tiles": lost[:50], "count": len(lost)},
                         hints=["evaluate a tile once it and its neighbours are clean"])
    zero = np.zeros((plan.clip, plan.clip), dtype=np.uint8)
    done = []
    for t in tiles:
        token.check()
        if fresh_eval(plan.tiles, store, t, model, window) is not None:
            continue
        tgt = window_raster(index, plan.fill, plan.clip, plan.shift, t)
        after, _ = tile_eval(model, t, tgt, store.window("clean", plan, t, zero), window=window, token=token)
        before, _ = tile_eval(model, t, tgt, tgt, window=window, token=token)
        rec = eval_record(t, model, window, {c: store.info("clean", c)["digest"] for c in eval_cores(plan, t)},
                          after, before)
        path = store.root / "evals" / f"{t.tile_id}.json"
        _atomic_write(path, (json.dumps(rec, sort_keys=True) + "\n").encode())
        done.append(t.tile_id)
    return done


def eval_record(t: Tile, model, window, mask_cores: dict[str, str], after, before) -> dict[str, Any]:
    """A tile's evaluation record (`evals/<tile>.json`): the mask's ("after") and the target's
    ("before") evaluations of its window, bound to the window, the model, the process window and
    the digests of the cores the window read (`mask_cores`)."""
    return {"tile_id": t.tile_id, "origin": list(t.origin), "core": list(t.core), "model": _model_key(model),
            "window": window.name, "simulated": sorted(c.name for c in window.simulated),
            "mask_cores": dict(sorted(mask_cores.items())), "after": tile_eval_record(after),
            "before": tile_eval_record(before)}


def fresh_eval(plan_tiles: Sequence[Tile], store: TileStore, t: Tile, model, window) -> dict[str, Any] | None:
    """The tile's stored evaluation record when it is exact for the folder's mask as it is now:
    the same window, model and process window, and every core its window read still the folder's
    clean core (same digest, checked against the bytes). None otherwise (none, stale or foreign):
    the tile is then simulated again."""
    rec = read_eval(store.root, t.tile_id)
    near = [u.tile_id for u in plan_tiles if abs(u.row - t.row) <= 1 and abs(u.col - t.col) <= 1]
    want = {c: (store.info("clean", c) or {}).get("digest") for c in sorted(near)}
    return rec if rec is not None and eval_fits(rec, t, want, model, window) else None


def read_eval(root: Path, tile_id: str) -> dict[str, Any] | None:
    """A tile folder's evaluation record of a tile (`evals/<tile>.json`), None when absent or unreadable."""
    path = Path(root) / "evals" / f"{tile_id}.json"
    if not path.is_file():
        return None
    try:
        rec = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return rec if isinstance(rec, dict) else None


def eval_fits(rec: dict[str, Any], t: Tile, cores: dict[str, str | None], model, window) -> bool:
    """Whether an evaluation record is exact for tile `t` of a mask whose cores around it have the
    digests `cores` (tile id -> digest of `TileStore`'s bytes, None where unknown): the same
    window, model and process window, and every core its window read that very core. Pure."""
    return (rec.get("tile_id") == t.tile_id and rec.get("origin") == list(t.origin) and rec.get("core") == list(t.core)
            and rec.get("model") == _model_key(model) and rec.get("window") == window.name
            and rec.get("simulated") == sorted(c.name for c in window.simulated)
            and rec.get("mask_cores") == cores and None not in cores.values())


def core_digest(core: np.ndarray) -> str:
    """The digest a tile folder records for a core (`TileStore.save`): of its bit-packed bytes."""
    return digest_bytes(_pack(core))
