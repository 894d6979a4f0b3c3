"""optimize() for a layout larger than one clip: tiles in waves, stitch, seam check, streaming evaluation.

The request's `tiling` object says where the finished tiles live (`dir`,
default `<out>.tiles/` beside the mask), which tiles to run (`tiles`, default
all), whether to stitch (`stitch`, default: when every tile is asked for),
the halo (`halo_nm`, default the optical radius), which of its tiles to clean
up once optimised (`clean`: a task whose checkout holds those tiles'
neighbours cleans them in the waves, and the stitch only assembles), which
seam windows to re-simulate (`seams`: once the tiles under them are clean;
the stitch then only compares their records with the tiles' own prints), which
tiles to evaluate (`evaluate`: once they and their neighbours are clean, each on
its own window, stored in `evals/`; the stitch then sums those records instead
of simulating the tiles again, wherever they are still exact) and
whether to run the seam check (`seam_check`, default true). A batch of tiles without stitching is how
a work queue spreads one layout over many workers; the stitch task then finds
every tile in the folder and redoes none.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from registry.canonical import digest_bytes, digest_json
from worker_sdk.cancel import CancellationToken

from . import tiled
from .errors import BadRequest
from .streaming import PolygonIndex, evaluate_streaming, tile_scores


def tile_dir(req: dict[str, Any]) -> Path:
    t = req.get("tiling") or {}
    if t.get("dir"):
        return Path(t["dir"])
    if req.get("out"):
        out = Path(req["out"])
        return out.with_name(out.name.split(".")[0] + ".tiles")
    raise BadRequest("tiled optimize needs tiling.dir or out", code="LITHO_BAD_TILE_PLAN",
                     hints=["pass tiling: {dir: ...} or out"])


def optimize_tiled(req: dict[str, Any], inp, model64, model32, window, rules, cfg, token: CancellationToken,
                   progress: Callable[[int, int, float], None] | None = None, journal=None) -> dict[str, Any]:
    """Run (or resume) the tiles a request asks for; stitch, evaluate and write the mask when asked.
    A `journal` (tilejournal.TileJournal) restores the tiles earlier attempts of the task finished
    and makes each tile durable as soon as it is done."""
    t0 = time.perf_counter()
    opts = req.get("tiling") or {}
    if req.get("out") and Path(req["out"]).suffix.lower() == ".png":
        raise BadRequest("a tiled mask is written as .oas or .gds", code="LITHO_BAD_TILE_PLAN",
                         details={"out": req["out"]})
    plan = tiled.plan_layout(inp.layout, model32, inp.fill, opts.get("halo_nm"))
    only = opts.get("tiles")
    if only is not None:
        for tid in only:
            plan.tile(tid)
    stitch = bool(opts.get("stitch", only is None))
    to_clean = list(opts.get("clean") or [])
    outside = sorted(set(to_clean) - set(only if only is not None else [t.tile_id for t in plan.tiles]))
    if outside:
        raise BadRequest("tiling.clean names tiles the task does not hold", code="LITHO_BAD_TILE_PLAN",
                         details={"tiles": outside[:50]}, hints=["list them in tiling.tiles too"])
    seam_ids = list(opts.get("seams") or [])
    windows = {w.tile_id: w for w in tiled.seam_windows(plan)}
    unknown = sorted(set(seam_ids) - set(windows))
    if unknown:
        raise BadRequest("tiling.seams names seam windows the plan does not have", code="LITHO_UNKNOWN_TILE",
                         details={"seams": unknown[:50]}, hints=["seam windows are S_<row>_<col> of the plan"])
    to_eval = list(opts.get("evaluate") or [])
    for tid in to_eval:
        plan.tile(tid)  # unknown ids are refused before any work
    if stitch and not req.get("out"):
        raise BadRequest("stitching writes the mask: give out", code="LITHO_BAD_TILE_PLAN")
    pin = tiled.store_pin(plan, inp.layout, cfg, req.get("mrc"), window)
    store = tiled.TileStore(tile_dir(req), pin)
    if journal is not None:
        journal.restore(store, digest_json(pin), list(only) if only is not None else [t.tile_id for t in plan.tiles])
    index = PolygonIndex(inp.layout)
    n = len(only) if only is not None else len(plan.tiles)
    count = {"done": 0}

    def on_tile(tile_id: str, rec: dict[str, Any], resumed: bool) -> None:
        count["done"] += 1
        if journal is not None and not resumed:
            journal.record(store, tile_id)
        if progress is not None:
            progress(count["done"], n, float(rec.get("final_loss") or 0.0))

    secs: dict[str, float] = {}
    mark = time.perf_counter()
    done = tiled.optimize_tiles(model32, plan, store, index, cfg, corners=window.corners, only=only, token=token,
                                on_tile=on_tile)
    info: dict[str, Any] = {"plan": plan.describe(), "dir": str(store.root),
                            "tiles_run": sorted(r["tile_id"] for r in done if not r["resumed"]),
                            "tiles_resumed": sorted(r["tile_id"] for r in done if r["resumed"]),
                            "stitched": False, "seconds": secs}
    if journal is not None:
        info["tiles_restored"] = sorted(journal.restored)
    secs["tiles"] = _lap(mark)
    if to_clean:
        mark = time.perf_counter()
        info["tiles_cleaned"] = sorted(tiled.clean_tiles(plan, store, index, cfg, rules, to_clean, token=token))
        secs["clean"] = _lap(mark)
    if seam_ids:
        mark = time.perf_counter()
        for sid in seam_ids:
            token.check()
            tiled.save_seam_record(store, tiled.seam_window(model64, plan, store, index, cfg, rules, windows[sid],
                                                            window=window, token=token))
        info["seams_checked"] = sorted(seam_ids)
        secs["seams"] = _lap(mark)
    if to_eval:
        mark = time.perf_counter()
        tiled.evaluate_tiles(model64, plan, store, index, to_eval, window=window, token=token)
        info["tiles_evaluated"] = sorted(to_eval)
        secs["evaluate"] = _lap(mark)
    if journal is not None:
        journal.after_work()  # the test hook that loses this attempt once its work is done
    info["plan"].pop("waves")
    resp: dict[str, Any] = {"schema_version": "1.3.0", "tool": "optimize", "status": "completed", "tiling": info}
    ilt = {"iterations": sum(int(r.get("iterations") or 0) for r in done), "seed": cfg.seed,
           "bridge_weight": cfg.bridge_weight,
           "stages": [{"scale_nm": s.scale, "iterations": s.iterations, "lr": s.lr} for s in cfg.stages],
           "gradient": "exact adjoint (autograd through the band-limited SOCS model), per tile, "
                       "the tiles of a wave batched as [B, N, N]",
           "tiles": len(done)}
    resp["ilt"] = ilt
    if not stitch:
        info["missing"] = tiled.missing(plan, store)
        resp["runtime_s"] = round(time.perf_counter() - t0, 3)
        info["peak_rss_mb"] = peak_rss_mb()
        return resp
    mark = time.perf_counter()
    info["tiles_cleaned"] = sorted(tiled.stitch(plan, store, index, cfg, rules, token=token))
    secs["clean"] = _lap(mark)
    mark = time.perf_counter()
    out = Path(req["out"])
    polygons = tiled.write_mask(plan, store, out)
    secs["stitch"] = _lap(mark)
    mark = time.perf_counter()
    bands = tiled.SeamBands()
    fused = WaveEvals(plan.tiles, store, model64, window)  # tiles evaluated in the waves are summed, not simulated
    after = evaluate_streaming(model64, inp.layout, mask_window=tiled.mask_window(plan, store), fill=inp.fill,
                               halo=plan.halo, window=window, token=token, on_print=bands.keep,
                               done=fused.part("after"))
    before = evaluate_streaming(model64, inp.layout, fill=inp.fill, halo=plan.halo, window=window, token=token,
                                done=fused.part("before"))
    secs["evaluate"] = _lap(mark)
    info["tiles_evaluated_in_waves"] = len(fused.used)
    mark = time.perf_counter()
    seams = (tiled.seam_check(model64, plan, store, index, cfg, rules, window=window, bands=bands, token=token,
                              done=tiled.seam_records(store))
             if opts.get("seam_check", True) else None)
    secs["seam_check"] = _lap(mark)
    info["stitched"] = True
    info["missing"] = []
    info["per_tile"] = per_tile_scores(before, after)
    if seams is not None:
        info["seam_check"] = seams
    resp["after"] = after
    resp["before"] = before
    resp["mask"] = {"path": str(out), "format": "oasis" if out.suffix.lower() == ".oas" else "gds",
                    "polygons": polygons, "layer": "1/0", "frame": "input_layout_native",
                    "file_digest": digest_bytes(out.read_bytes())}
    if req.get("mrc"):
        resp["mask"]["mask_rules"] = dict(req["mrc"])
    resp["runtime_s"] = round(time.perf_counter() - t0, 3)
    info["peak_rss_mb"] = peak_rss_mb()
    return resp


class WaveEvals:
    """The tiles' evaluations made in the waves (`evals/` of a tile folder), each taken only where
    it is still exact for the folder's clean mask (`tiled.fresh_eval`); `used` names those taken."""

    def __init__(self, tiles, store: tiled.TileStore, model, window) -> None:
        self.tiles, self.store, self.model, self.window = list(tiles), store, model, window
        self.used: set[str] = set()

    def _record(self, t):
        rec = tiled.fresh_eval(self.tiles, self.store, t, self.model, self.window)
        if rec is not None:
            self.used.add(t.tile_id)
        return rec

    def part(self, kind: str):
        """done(tile) for `evaluate_streaming`: the tile's evaluation of the mask ("after") or of
        the target ("before"), or None."""
        from .streaming import tile_eval_from_record

        def done(t):
            rec = self._record(t)
            return tile_eval_from_record(rec[kind]) if rec is not None else None
        return done

    def prints(self, t):
        """prints_of(tile) for `engine.evaluate`: the core prints of the mask, or None."""
        done = self.part("after")(t)
        return done.prints if done is not None else None


def per_tile_scores(before, after) -> list[dict[str, Any]]:
    """Each tile's core (layout nm) and its L2 before and after ILT, PVB and EPE markers after: what
    the report's tile map colours and labels. Pure: from the two streamed evaluations."""
    base = {s.tile_id: s.l2 for s in before.per_tile}
    return [{**row, "l2_before_nm2": base.get(row["tile_id"])} for row in tile_scores(after)]


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (MiB)."""
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)


def _lap(mark: float) -> float:
    return round(time.perf_counter() - mark, 3)


def prepare(request: dict[str, Any]):
    """Plan a tiled optimize request and create its tile folder (plan.json) without optimising:
    what a work queue's repository commits before its tile tasks run. Returns the TilePlan."""
    from registry.schema_store import validate

    from .ilt import ILTConfig
    from .inputs import load_inputs, load_model, window as process_window
    from .presets import apply_preset

    validate("litho/optimize_request", request)
    request = apply_preset(request)  # the same settings optimize pins the folder to
    inp = load_inputs({k: request[k] for k in ("layout", "layer", "fill") if k in request})
    model32 = load_model(request, "float32")
    window = process_window(request, model32)
    cfg = ILTConfig.from_request(request)
    plan = tiled.plan_layout(inp.layout, model32, inp.fill, (request.get("tiling") or {}).get("halo_nm"))
    tiled.TileStore(tile_dir(request), tiled.store_pin(plan, inp.layout, cfg, request.get("mrc"), window))
    return plan
