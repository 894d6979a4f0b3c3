"""Domain tools of the litho engine: evaluate, optimize, simulate (request dict -> response dict).

The CLI (`python -m worker_sdk.litho`), the worker intents and the MCP servers
all call these. Requests are validated against the closed JSON Schemas
registry/schemas/litho/<tool>_request.json; responses carry schema_version and
follow the open response schemas. `dumps` gives the exact bytes the CLI prints,
so an aggregate response is byte-identical across paths.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from registry.canonical import digest_bytes
from registry.schema_store import validate
from worker_sdk.cancel import NEVER, CancellationToken

from . import pins
from .capabilities import LAYOUT_AREA_NM2_MAX, MAX_VIOLATIONS_PER_RESPONSE, VIOLATION_COUNT_MAX, capabilities
from .errors import BadRequest, CacheEvicted, LayoutFormatError, ViolationNotFound
from .layout import FILLS, rasterize
from .inputs import ENGINE, ENGINE_VERSION, kernels_dir, load_model  # noqa: F401 - kernels_dir: part of the api
from .inputs import Inputs as _Inputs, load_inputs as _load_inputs, window as _window
from .provenance import stamp_result
from .violations import (RULE_DECK_NAME, RULES, SCHEMA_VERSION, TOPOLOGY_RULES, RawRecord, decode_violation_id,
                         dedup, encode_violation_id, rule_deck, rule_deck_hash)

MODEL = "socs-bandlimited-v1"


def dumps(response: dict[str, Any]) -> str:
    """The one serialisation of a response (sorted keys, compact, ASCII): what the CLI prints."""
    return json.dumps(response, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _provenance(inp: _Inputs, ev, model, deck_hash: str, request: dict[str, Any]) -> dict[str, Any]:
    from .forward import THRESHOLD

    return {
        "engine": ENGINE,
        "engine_version": ENGINE_VERSION,
        "model": MODEL,
        "fill": inp.fill,
        "canvas_px": [int(ev.canvas[0]), int(ev.canvas[1])],
        "pixel_nm": 1,
        "placement_shift_nm": [int(ev.shift[0]), int(ev.shift[1])],
        "tiles": len(ev.tiles),
        "tiled": len(ev.tiles) > 1 or ev.tiles[0].origin != (0, 0),
        "threshold": THRESHOLD,
        "corners": [{"name": c.name, "kernels": c.kernel, "dose": c.dose} for c in ev.window.corners],
        "process_window": ev.window.describe(),
        "kernels": dict(sorted(model.digests.items())),
        "layout": {"path": inp.layout_path, "digest": digest_bytes(Path(inp.layout_path).read_bytes()),
                   "layer": inp.layout.layer, "polygons": len(inp.layout.polygons)},
        "mask": inp.mask_desc,
        "rule_deck": {"name": RULE_DECK_NAME, "hash": deck_hash},
        "precision": "float64",
    }


def _metrics(ev) -> dict[str, Any]:
    from .metrics import topology_counts

    out = {
        "l2_nm2": ev.l2,
        "pvb_nm2": ev.pvb,
        "epe_violations": ev.epe,
        "epe_samples": ev.epe_samples,
        # the measured edge placement error at the same samples (nm, |signed|, capped at 64)
        "epe_mean_nm": round(float(np.abs(ev.epe_nm).mean()), 3) if len(ev.epe_nm) else 0.0,
        "epe_max_nm": int(np.abs(ev.epe_nm).max()) if len(ev.epe_nm) else 0,
        "score": 5000 * ev.epe + 4 * ev.pvb,
        "fill": ev.fill,
        "corners": ev.window.name,
        "topology_defects": ev.topology_defects,
        "topology": {name: topology_counts(recs) for name, recs in ev.topology.items()},
    }
    if ev.window.grid:
        out["pvb_grid_nm2"] = ev.pvb_grid
    return out


def _raw_records(ev) -> list[RawRecord]:
    from .engine import region_records

    recs: list[RawRecord] = []
    for rule_id, metric in (("LITHO.L2.AREA", "l2"), ("LITHO.PVB.AREA", "pvb")):
        for r in region_records(ev, metric):
            t = r["tile"]
            recs.append(RawRecord(rule_id, float(r["x"]), float(r["y"]), tuple(float(v) for v in r["bbox"]),
                                  t.tile_id, t.origin, int(r["area"]),
                                  group_bbox=tuple(float(v) for v in r["group_bbox"])))
    for e in ev.epe_records:
        t = ev.tile_of(e["x"], e["y"])
        recs.append(RawRecord("LITHO.EPE.15NM", float(e["x"]), float(e["y"]),
                              (e["x"], e["y"], e["x"], e["y"]), t.tile_id, t.origin, 0,
                              {"kind": e["kind"], "normal": e["normal"]}))
    for corner, defects in ev.topology.items():
        for d in defects:
            t = ev.tile_of(d["x"], d["y"])
            recs.append(RawRecord(TOPOLOGY_RULES[d["kind"]], float(d["x"]), float(d["y"]),
                                  tuple(float(v) for v in d["bbox"]), t.tile_id, t.origin, int(d["area"]),
                                  {"corner": corner, "kind": d["kind"],
                                   "target_shapes": len(d["target_components"]),
                                   "print_shapes": len(d["print_components"])}))
    return recs


def _violations(ev, deck_hash: str, session: str, inp: _Inputs) -> list[dict[str, Any]]:
    grouped = dedup(_raw_records(ev), deck_hash)
    dx, dy = ev.shift
    out = []
    for g in grouped:
        rec: RawRecord = g["record"]
        rule = RULES[rec.rule_id]
        loc = g["canonical_location"]
        # the canonical record stands for its group: it sits at the group's canonical location (the
        # centre of the union of the pieces); a shadow keeps its own piece's location
        x, y = (loc[0], loc[1]) if g["canonical"] else (rec.x, rec.y)
        vid = encode_violation_id(deck_hash, g["group_id"], g["index"], loc, rec.rule_id,
                                  offset=(x - loc[0], y - loc[1]))
        ctx: dict[str, Any] = {
            "tile_id": rec.tile_id,
            "tile_origin_nm": [float(rec.tile_origin[0]), float(rec.tile_origin[1])],
            "tile_local_nm": [x - rec.tile_origin[0], y - rec.tile_origin[1]],
            "bbox_nm": [float(v) for v in rec.bbox],
            "location_native_nm": [x - dx, y - dy],
            "metric": rule["metric"],
        }
        if rec.area:
            ctx["area_nm2"] = rec.area
        if rec.extra:
            ctx.update(rec.extra)
        v = {
            "violation_id": vid,
            "violation_group_id": g["group_id"],
            "rule_id": rec.rule_id,
            "rule_deck": RULE_DECK_NAME,
            "severity": rule["severity"],
            "coordinate_frame": "post_transform_canvas",
            "location_nm": [x, y],
            "transforms": [
                {"op": "translate", "params": {"from": "input_layout_native", "dx": dx, "dy": dy}},
                {"op": "tile_stitch", "params": {"tile_id": rec.tile_id, "origin": [rec.tile_origin[0], rec.tile_origin[1]]}},
            ],
            "context": ctx,
            "dedup_strategy": "canonical" if g["canonical"] else "shadow",
            "dedup_provenance": {
                "rule_deck_hash": deck_hash,
                "radius_nm": g["radius"],
                "rule_id": rec.rule_id,
                "canonical_location_nm": [loc[0], loc[1]],
                "record_index": g["index"],
            },
        }
        out.append(v)
        pins.CACHE.put(session, vid, {"violation": v, "layout": inp.layout_path, "layer": inp.layout.layer,
                                       "fill": inp.fill, "canonical_location": list(loc)})
    return out


def evaluate(request: dict[str, Any], token: CancellationToken | None = None,
             progress: Callable[[float, str], None] | None = None,
             tile_dir: str | Path | None = None) -> dict[str, Any]:
    """Evaluate a mask (default: the target itself) for a layout: L2, PVB, EPE, optionally violations[].

    `progress(fraction, message)` is told each phase as it starts (inputs, model, corners, violations).
    `tile_dir`: the tile folder the mask was stitched from; the tiles it holds evaluations of
    (made in the waves, still exact for its clean cores) are summed, not simulated again. The
    caller vouches that the mask is that folder's clean mask (the stitch writes both).
    """
    return _evaluate(request, token, progress, tile_dir)[0]


def evaluate_scored(request: dict[str, Any], token: CancellationToken | None = None
                    ) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    """evaluate(request), simulated here tile by tile wherever the canvas is tiled and the mask is
    a layout (streamed: the memory of one tile whatever the layout's size; the figures are the
    whole canvas's), with each tile's scores (`streaming.tile_scores`; None when not streamed).
    What litho.resim reproduces a committed report from, in one simulation per mask."""
    from .streaming import tile_scores

    resp, ev = _evaluate(request, token, None, None, prefer_streaming=True)
    return resp, (tile_scores(ev) if getattr(ev, "streamed", False) else None)


def _evaluate(request: dict[str, Any], token: CancellationToken | None,
              progress: Callable[[float, str], None] | None, tile_dir: str | Path | None,
              prefer_streaming: bool = False) -> tuple[dict[str, Any], Any]:
    """The response and the evaluation it was made from (`engine.Evaluation` or `StreamedEvaluation`)."""
    from .engine import evaluate as run_eval

    report = progress or (lambda fraction, message: None)
    validate("litho/evaluate_request", request)
    token = token or NEVER
    level = request.get("report_level", "aggregate")
    report(0.05, "loading inputs")
    inp = _load_inputs(request)
    report(0.15, "building the optical model")
    model = load_model(request)
    window = _window(request, model)
    tile = {"auto": None, "always": True, "never": False}[request.get("tile", "auto")]
    report(0.3, "simulating the process corners")
    halo = int(request.get("halo_nm", 512))
    made = _wave_evals(tile_dir, inp, model, window, halo) if tile_dir is not None and inp.mask is None else None
    if _streams(request, inp, model, tile, prefer_streaming):
        from .streaming import evaluate_streaming

        ev = evaluate_streaming(model, inp.layout, mask_layout=inp.mask_layout, fill=inp.fill,
                                halo=halo, window=window, token=token, done=made and made.part("after"),
                                regions=level == "detailed")
    else:
        ev = run_eval(model, inp.layout, mask=inp.mask, mask_layout=inp.mask_layout, fill=inp.fill, tile=tile,
                      halo=halo, window=window, token=token, prints_of=made and made.prints)
    report(0.85, "scoring" + (" and listing violations" if level == "detailed" else ""))
    return _evaluate_response(request, inp, model, ev, token, made), ev


def _wave_evals(tile_dir: str | Path, inp: _Inputs, model, window, halo: int):
    """The tile folder's evaluations made in the waves, for the evaluation canvas's tiles."""
    from .streaming import canvas_plan
    from .tiled import TileStore
    from .tiledjob import WaveEvals

    _, _, tiles = canvas_plan(inp.layout, model.size, halo, inp.fill)
    return WaveEvals(tiles, TileStore.existing(tile_dir), model, window)


def _streams(request: dict[str, Any], inp: _Inputs, model, tile: bool | None, prefer: bool = False) -> bool:
    """Whether evaluate() goes tile by tile (see streaming.py); a typed error for what it cannot do.
    `prefer`: stream every tiled canvas the request leaves to the engine, whatever its size."""
    from .engine import needs_tiling
    from .streaming import wants_streaming

    asked = request.get("streaming")
    if asked and (tile is False or inp.mask is not None):
        raise BadRequest("streaming evaluation is tiled and takes the mask as a layout",
                         code="LITHO_STREAMING_UNSUPPORTED", details={"tile": request.get("tile", "auto")})
    if tile is False or inp.mask is not None:
        return False
    if asked is None and prefer and needs_tiling(inp.layout, model.size):
        return True
    return wants_streaming(asked, inp.layout, model.size, int(request.get("halo_nm", 512)), inp.fill)


def evaluate_batch(requests: list[dict[str, Any]], token: CancellationToken | None = None,
                   memory_budget_bytes: int | None = None) -> list[dict[str, Any]]:
    """evaluate() over single clips, simulated together as [B, N, N] tensors sized by a memory budget
    (default: half the free GPU memory, 1 GiB on CPU). Requests that share model settings (kernels,
    device, fill, corners) are batched together; each response is byte-identical to evaluate(request)'s."""
    from .engine import ClipInput, needs_tiling
    from .engine import evaluate_batch as run_batch

    token = token or NEVER
    for r in requests:
        validate("litho/evaluate_request", r)
        if r.get("tile", "auto") == "always":
            raise BadRequest("the batch path takes single clips (tile: always asks for tiling)",
                             code="LITHO_BATCH_NEEDS_CLIPS")
    out: list[dict[str, Any] | None] = [None] * len(requests)
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(requests):
        key = json.dumps({k: r.get(k) for k in ("kernels", "kernel_source", "device", "fill", "corners", "pvb_grid",
                                                 "threads")}, sort_keys=True)
        groups.setdefault(key, []).append(i)
    for idx in groups.values():
        first = requests[idx[0]]
        model = load_model(first)
        window = _window(first, model)
        inputs = [_load_inputs(requests[i]) for i in idx]
        for i, inp in zip(idx, inputs):
            if requests[i].get("tile", "auto") == "auto" and needs_tiling(inp.layout, model.size):
                raise BadRequest("the batch path takes single clips; evaluate a larger layout on its own (tiled)",
                                 code="LITHO_BATCH_NEEDS_CLIPS", details={"layout": inp.layout_path})
        evs = run_batch(model, [ClipInput(inp.layout, inp.mask, inp.mask_layout) for inp in inputs], fill=inputs[0].fill,
                        window=window, memory_bytes=memory_budget_bytes, token=token)
        for i, inp, ev in zip(idx, inputs, evs):
            out[i] = _evaluate_response(requests[i], inp, model, ev, token)
    return [r for r in out if r is not None]


def _evaluate_response(request: dict[str, Any], inp: _Inputs, model, ev, token: CancellationToken,
                       made=None) -> dict[str, Any]:
    level = request.get("report_level", "aggregate")
    deck = rule_deck(inp.fill, model.digests, ev.window)
    deck_hash = rule_deck_hash(deck)
    resp: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": "evaluate",
        "report_level": level,
        "metrics": _metrics(ev),
        "provenance": _provenance(inp, ev, model, deck_hash, request),
    }
    if made is not None:  # how many tiles were summed from the waves' evaluations, not simulated here
        resp["provenance"]["tiles_evaluated_in_waves"] = len(made.used)
    if request.get("pin"):
        resp["layout_artifact_id"] = pins.pin_layout(inp.layout_path)
    if level == "detailed":
        token.check()
        x0, y0, x1, y1 = inp.layout.bbox()
        area = float(x1 - x0) * float(y1 - y0)
        count_max = min(int(request.get("violation_count_max", VIOLATION_COUNT_MAX)), VIOLATION_COUNT_MAX)
        session = request.get("session_id", "default")
        reason = None
        if area > LAYOUT_AREA_NM2_MAX:
            reason = "layout_area_nm2_max"
            viols = None
        else:
            viols = _violations(ev, deck_hash, session, inp)
            if len(viols) > count_max:
                reason = "violation_count_max"
        resp["degraded_to_aggregate"] = reason is not None
        if reason is None:
            resp["violations"] = viols[:MAX_VIOLATIONS_PER_RESPONSE]
            resp["violation_count"] = len(viols)
            resp["rule_deck"] = {"name": RULE_DECK_NAME, "hash": deck_hash, "rules": deck["rules"]}
        else:
            resp["degraded_reason"] = reason
            if viols is not None:
                resp["violation_count"] = len(viols)
    return stamp_result(resp, request, tool="evaluate", fill=inp.fill, report_level=level)


# ----- optimize ------------------------------------------------------------------------------

def resolve_violation(request: dict[str, Any], model=None) -> dict[str, Any]:
    """Resolve optimize's violation_id: session cache first, else from the id itself with a pinned layout."""
    model = model or load_model(request)
    vid = request["violation_id"]
    scope = request.get("scope", "group")
    session = request.get("session_id", "default")
    dec = decode_violation_id(vid)
    entry = pins.CACHE.get(session, vid)
    if entry is not None:
        layout_path, layer, fill, via = entry["layout"], entry["layer"], entry["fill"], "session_cache"
    else:
        path = pins.resolve_pin(request.get("layout_artifact_id"))  # raises LAYOUT_NOT_PINNED
        fill = None
        for f in FILLS:
            if rule_deck_hash(rule_deck(f, model.digests)).split(":", 1)[1][:16] == dec.deck_prefix:
                fill = f
        if fill is None:
            if pins.CACHE.was_evicted(session, vid):
                raise CacheEvicted("violation was evicted from the session cache and its rule deck is not this engine's",
                                   details={"violation_id": vid}, hints=["re-run evaluate(report_level=detailed)"])
            raise ViolationNotFound("violation_id names a rule deck this engine does not have", details={"violation_id": vid})
        layout_path, layer, via = str(path), None, "self_describing_id"
    canon = dec.location
    if scope == "group":
        target_loc = canon
        resolved_index = 0
    else:
        target_loc = (canon[0] + dec.offset[0], canon[1] + dec.offset[1])
        resolved_index = dec.index
    resolved_id = encode_violation_id_from(dec, resolved_index)
    out = {"violation_id": vid, "resolved_violation_id": resolved_id, "violation_group_id": dec.group_id,
           "rule_id": dec.rule_id, "scope": scope, "resolved_via": via, "location_nm": [target_loc[0], target_loc[1]],
           "coordinate_frame": dec.frame, "layout": layout_path, "layer": layer, "fill": fill,
           "was_shadow": dec.index != 0}
    if scope == "group":
        # RFC 0006 2c: every member of the group is resolved by the one group fix; the members are the
        # ones the session's evaluate reported (the id alone names only itself and its canonical record)
        members = pins.CACHE.group_members(session, dec.group_id) if via == "session_cache" else []
        out["resolved_by_group_fix"] = sorted(set(members) | {resolved_id, vid})
        out["group_members_source"] = "session_cache" if members else "violation_id"
    return out


def encode_violation_id_from(dec, index: int) -> str:
    from .violations import reencode

    return reencode(dec, index)


def _mask_rules(mrc: dict[str, Any] | None):
    """The request's mask rules (None = no cleanup), checked before any work is done."""
    if not mrc:
        return None
    from .mrc import MaskRules

    try:
        return MaskRules(min_feature_px=int(mrc.get("min_feature_nm", 9)), halo_px=int(mrc.get("halo_nm", 256)),
                         min_area_px=int(mrc.get("min_area_nm2", 0)), min_space_px=int(mrc.get("min_space_nm", 0)))
    except ValueError as exc:
        raise BadRequest(f"mask rules: {exc}", code="LITHO_BAD_MASK_RULES", details={"mrc": dict(mrc)}) from exc


def _apply_mask_rules(mask: np.ndarray, target: np.ndarray, rules) -> np.ndarray:
    """The ILT mask after mask-rule cleanup (1 pixel = 1 nm), or unchanged without rules."""
    if rules is None:
        return mask
    import torch

    from .mrc import clean_mask

    cleaned = clean_mask(torch.from_numpy(np.asarray(mask, dtype=np.float32)),
                         torch.from_numpy(np.asarray(target, dtype=np.float32)), rules)
    return cleaned.numpy().astype(np.asarray(mask).dtype)


def optimize(request: dict[str, Any], token: CancellationToken | None = None,
             progress: Callable[[int, int, float], None] | None = None, journal=None) -> dict[str, Any]:
    """ILT for a layout (or for the clip/tile around a violation); writes the mask; returns metrics.
    `journal`: a tiled request's tilejournal.TileJournal (a tile task's durable finished tiles)."""
    from .engine import evaluate as run_eval
    from .engine import needs_tiling
    from .ilt import ILTConfig
    from .iltbatch import optimize_mask
    from .layout import placement, save_mask_png, write_mask_layout

    validate("litho/optimize_request", request)
    from .presets import apply_preset

    request = apply_preset(request)
    rules = _mask_rules(request.get("mrc"))
    token = token or NEVER
    t0 = time.perf_counter()
    model64 = load_model(request, "float64")
    model32 = load_model(request, "float32")
    window = _window(request, model64)
    resolved = None
    req = dict(request)
    if request.get("violation_id"):
        resolved = resolve_violation(request, model64)
        req.setdefault("layout", resolved["layout"])
        if resolved["fill"]:
            req["fill"] = resolved["fill"]
        if resolved["layer"] and not request.get("layer"):
            req["layer"] = resolved["layer"]
    if not req.get("layout"):
        raise BadRequest("optimize needs a layout or a violation_id")
    inp = _load_inputs({k: req[k] for k in ("layout", "layer", "fill") if k in req})
    cfg = ILTConfig.from_request(req)
    if needs_tiling(inp.layout, model64.size) or req.get("tiling"):
        return _optimize_tiled(req, inp, model64, model32, window, rules, cfg, token, progress, journal)
    shift = placement(inp.layout, inp.fill)
    target = rasterize(inp.layout, inp.fill, model64.size, shift)
    before = run_eval(model64, inp.layout, fill=inp.fill, window=window, token=token)
    result = optimize_mask(model32, target, cfg, token=token, progress=progress, corners=window.corners)
    token.check()
    final_mask = _apply_mask_rules(result.mask, target, rules)
    after = run_eval(model64, inp.layout, mask=final_mask, fill=inp.fill, window=window, token=token)
    out = Path(req["out"]) if req.get("out") else None
    mask_info: dict[str, Any] = {"digest": digest_bytes(np.ascontiguousarray(final_mask).tobytes()),
                                 "shape": list(final_mask.shape)}
    if req.get("mrc"):
        mask_info["mask_rules"] = dict(req["mrc"])
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix.lower() == ".png":
            save_mask_png(final_mask, out)
            mask_info.update({"path": str(out), "format": "png"})
        else:
            n = write_mask_layout(final_mask, out, shift)
            mask_info.update({"path": str(out), "format": "oasis" if out.suffix.lower() == ".oas" else "gds",
                              "polygons": n, "layer": "1/0", "frame": "input_layout_native"})
            png = out.with_suffix(".png")
            save_mask_png(final_mask, png)
            mask_info["preview_png"] = str(png)
        mask_info["file_digest"] = digest_bytes(out.read_bytes())
    deck_hash = rule_deck_hash(rule_deck(inp.fill, model64.digests, window))
    resp: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": "optimize",
        "status": "completed",
        "metrics": _metrics(after),
        "baseline_metrics": _metrics(before),
        "mask": mask_info,
        "ilt": {"iterations": result.iterations, "seed": cfg.seed, "bridge_weight": cfg.bridge_weight,
                "pvb_weight": cfg.pvb_weight, "band_weight": cfg.band_weight, "preset": req.get("preset"),
                "stages": [{"scale_nm": s.scale, "iterations": s.iterations, "lr": s.lr} for s in cfg.stages],
                "gradient": "exact adjoint (autograd through the band-limited SOCS model)",
                "final_loss": result.loss_history[-1] if result.loss_history else None,
                "threads": torch_threads()},
        "runtime_s": round(time.perf_counter() - t0, 3),
        "provenance": _provenance(inp, after, model64, deck_hash, req),
    }
    if resolved is not None:
        resp["resolved"] = {k: v for k, v in resolved.items() if k not in ("layout", "layer")}
    return stamp_result(resp, req, tool="optimize", fill=inp.fill, seed=cfg.seed)


def _optimize_tiled(req, inp, model64, model32, window, rules, cfg, token, progress, journal) -> dict[str, Any]:
    from .tiledjob import optimize_tiled

    resp = optimize_tiled(req, inp, model64, model32, window, rules, cfg, token, progress, journal)
    resp["schema_version"] = SCHEMA_VERSION
    resp["ilt"]["threads"] = torch_threads()
    after, before = resp.pop("after", None), resp.pop("before", None)
    if after is not None:
        resp["metrics"], resp["baseline_metrics"] = _metrics(after), _metrics(before)
        deck_hash = rule_deck_hash(rule_deck(inp.fill, model64.digests, window))
        resp["provenance"] = {**_provenance(inp, after, model64, deck_hash, req), "streamed": True}
    return stamp_result(resp, req, tool="optimize", fill=inp.fill, seed=cfg.seed)


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


# ----- simulate ------------------------------------------------------------------------------

def simulate(request: dict[str, Any], token: CancellationToken | None = None) -> dict[str, Any]:
    """Printed areas and peak intensities per corner; optional PNGs of the prints."""
    from .engine import evaluate as run_eval
    from .layout import save_mask_png

    validate("litho/simulate_request", request)
    token = token or NEVER
    inp = _load_inputs(request)
    model = load_model(request)
    window = _window(request, model)
    ev = run_eval(model, inp.layout, mask=inp.mask, mask_layout=inp.mask_layout, fill=inp.fill, window=window,
                  token=token)
    corners = {name: {"printed_area_nm2": int(np.count_nonzero(img))} for name, img in ev.printed.items()}
    resp: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "tool": "simulate", "corners": corners,
                            "target_area_nm2": int(np.count_nonzero(ev.target)),
                            "mask_area_nm2": int(np.count_nonzero(ev.mask))}
    if request.get("out_dir"):
        d = Path(request["out_dir"])
        d.mkdir(parents=True, exist_ok=True)
        for name, img in ev.printed.items():
            save_mask_png(img, d / f"print_{name}.png")
            corners[name]["png"] = str(d / f"print_{name}.png")
    deck_hash = rule_deck_hash(rule_deck(inp.fill, model.digests, window))
    resp["provenance"] = _provenance(inp, ev, model, deck_hash, request)
    return stamp_result(resp, request, tool="simulate", fill=inp.fill)


def describe() -> dict[str, Any]:
    """Tool descriptor data for tools/list: capabilities matrix and schema names."""
    return {**capabilities(), "tools": {
        t: {"request_schema": f"litho/{t}_request", "response_schema": f"litho/{t}_response"}
        for t in ("evaluate", "optimize", "simulate")}}

