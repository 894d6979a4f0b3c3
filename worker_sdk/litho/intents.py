"""Worker intents of the litho engine (names in worker_sdk.intents): evaluate, optimize, resimulate.

- litho.evaluate: action {layout, mask?, fill?, report_level?, out?, corners?, pvb_grid?, threads?, tiles?}:
  writes the metrics report (JSON) into the scratch checkout; the metrics are the evidence.
  `tiles` names the tile folder the mask was stitched from: the tiles evaluated in the waves
  (still exact for its clean cores) are summed from their records, not simulated again.
- litho.optimize: action {layout, out?, iterations?, seed?, fill?, kernels?, mrc?, corners?, pvb_grid?,
  threads?, tiling?, bridge_weight?, pvb_weight?, band_weight?, preset?}: writes the
  mask (OASIS + PNG preview) and its metrics JSON into the scratch checkout;
  those files become the PatchProposal, the metrics its evidence. With
  `tiling: {dir, tiles, stitch: false}` (a layout larger than one clip) it
  optimises a batch of tiles into the tile folder instead; those finished
  tiles are the proposal, and a later task with `stitch` writes the mask.
  Each finished tile is put through the gateway at once, and a retried
  attempt of the task reuses the tiles earlier attempts finished
  (tilejournal).
- litho.resim (validation suite): re-simulates every committed mask named in
  the repository's litho metrics files (`*.litho.json`) and checks that L2 and
  PVB reproduce exactly; summary.passed says whether all did.
- litho.topology (validation suite): re-simulates the same masks and fails any
  whose print has a bridge, open, extra or missing shape at any corner of the
  process window (params: corners?, pvb_grid?, kernels?, threads?).
`threads` defaults to the cores the executor grants ($DOME_WORKER_CPUS).
Paths in an action (layout, mask, out, kernels) are relative to the scratch
checkout (absolute paths are allowed for read-only inputs such as the ICCAD data).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from worker_sdk.intents import IntentContext, IntentFailed, IntentResult

from . import api
from .tiledjob import peak_rss_mb

METRICS_SUFFIX = ".litho.json"
# what a pre-initialised runtime may import before it forks a litho worker (worker_sdk/zygote.py):
# imports only, which start no thread and touch no device
PRELOAD = ("torch", "worker_sdk.litho.engine", "worker_sdk.litho.forward")


def _path(ctx: IntentContext, value: str) -> Path:
    p = Path(value)
    if p.is_absolute():
        return p
    full = (ctx.scratch / p).resolve()
    if ctx.scratch.resolve() not in full.parents and full != ctx.scratch.resolve():
        raise IntentFailed("path escapes the scratch checkout", details={"path": value})
    return full


def _rel(ctx: IntentContext, p: Path) -> str:
    try:
        return str(p.resolve().relative_to(ctx.scratch.resolve()))
    except ValueError:
        return str(p)


def _window_keys(a: dict[str, Any]) -> dict[str, Any]:
    """The process-window and thread keys an action may pass through to the engine."""
    return {k: a[k] for k in ("corners", "pvb_grid", "threads") if a.get(k) is not None}


def _evidence(kind: str, resp: dict[str, Any], files: dict[str, str]) -> dict[str, Any]:
    return {"kind": f"litho.{kind}", "schema_version": resp["schema_version"], "metrics": resp["metrics"],
            "files": files, "provenance": {k: resp["provenance"][k] for k in
                                           ("engine", "engine_version", "model", "fill", "kernels", "rule_deck")}}


def evaluate(ctx: IntentContext) -> IntentResult:
    a = ctx.action
    req: dict[str, Any] = {"layout": str(_path(ctx, a["layout"])), "fill": a.get("fill", "lithobench"),
                           "report_level": a.get("report_level", "aggregate")}
    if a.get("mask"):
        req["mask"] = str(_path(ctx, a["mask"]))
    req.update(_window_keys(a))
    if a.get("kernels"):
        req["kernels"] = str(_path(ctx, a["kernels"]))
    ctx.progress(0.05, "evaluating")
    resp = api.evaluate(req, ctx.token, tile_dir=_path(ctx, a["tiles"]) if a.get("tiles") else None)
    out = _path(ctx, a.get("out", "litho/evaluate" + METRICS_SUFFIX))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(api.dumps(resp) + "\n")
    ctx.progress(1.0, "evaluated")
    files = {"metrics": _rel(ctx, out)}
    return IntentResult(summary={"metrics": resp["metrics"], "files": files, "peak_rss_mb": peak_rss_mb()},
                        evidence=[_evidence("evaluate", resp, files)], metrics=resp["metrics"])


def optimize(ctx: IntentContext) -> IntentResult:
    a = ctx.action
    layout = _path(ctx, a["layout"])
    out = _path(ctx, a.get("out", f"litho/{layout.stem}.mask.oas"))
    req: dict[str, Any] = {"layout": str(layout), "out": str(out), "fill": a.get("fill", "lithobench"),
                           "seed": int(a.get("seed", ctx.seed))}
    for key in ("iterations", "layer", "mrc", "bridge_weight", "preset"):
        if a.get(key):
            req[key] = a[key]
    for key in ("pvb_weight", "band_weight"):  # 0 is a meaningful weight
        if a.get(key) is not None:
            req[key] = a[key]
    req.update(_window_keys(a))
    if a.get("kernels"):
        req["kernels"] = str(_path(ctx, a["kernels"]))
    if a.get("tiling"):
        req["tiling"] = dict(a["tiling"])
        if req["tiling"].get("dir"):
            req["tiling"]["dir"] = str(_path(ctx, req["tiling"]["dir"]))

    def progress(done: int, total: int, loss: float) -> None:
        what = "tile" if req.get("tiling") else "ILT iteration"
        ctx.progress(0.05 + 0.9 * done / max(total, 1), f"{what} {done}/{total}")

    resp = api.optimize(req, ctx.token, progress=progress, journal=_journal(ctx) if req.get("tiling") else None)
    if resp.get("tiling") and not resp["tiling"]["stitched"]:
        return _tile_batch(ctx, resp)
    report = {
        "schema_version": resp["schema_version"],
        "layout": _rel(ctx, layout),
        "mask": _rel(ctx, out),
        "fill": req["fill"],
        "metrics": resp["metrics"],
        "baseline_metrics": resp["baseline_metrics"],
        "ilt": resp["ilt"],
        "mask_file_digest": resp["mask"].get("file_digest"),
    }
    if resp.get("tiling"):
        report["tiling"] = {**{k: v for k, v in resp["tiling"].items() if k != "dir"},
                            "dir": _rel(ctx, Path(resp["tiling"]["dir"]))}
    metrics_path = out.with_name(out.name.split(".")[0] + METRICS_SUFFIX)
    metrics_path.write_text(json.dumps(report, sort_keys=True, indent=2) + "\n")
    files = {"mask": _rel(ctx, out), "preview_png": _rel(ctx, Path(resp["mask"]["preview_png"])) if "preview_png" in resp["mask"] else "",
             "metrics": _rel(ctx, metrics_path)}
    ctx.progress(1.0, "optimized")
    return IntentResult(summary={"metrics": resp["metrics"], "baseline_metrics": resp["baseline_metrics"], "files": files},
                        evidence=[_evidence("optimize", resp, files)], metrics=resp["metrics"])


def _journal(ctx: IntentContext):
    """The tile task's journal through the attempt's gateway: the tiles earlier attempts of this
    task finished (get_task's `resume`), and a put for each tile this attempt finishes."""
    from .tilejournal import TileJournal, exit_first_hook, exit_hook

    gw = ctx.gateway
    if gw is None or "get_task" not in getattr(gw, "allowed", ()):
        return None
    task = gw.call("get_task", {"node_execution_id": gw.neid})
    put = ((lambda data, media_type, name: gw.put_artifact(data, media_type, name))
           if "put_artifact" in gw.allowed else None)
    return TileJournal(task["node_id"], task.get("resume", []), put, exit_hook(ctx.action.get("env")),
                       exit_first_hook(ctx.action.get("env")))


def _tile_batch(ctx: IntentContext, resp: dict[str, Any]) -> IntentResult:
    """A batch of tiles of a tiled layout: the finished cores are the proposal; the tiles' record the evidence."""
    t = resp["tiling"]
    summary = {"tiles_run": t["tiles_run"], "tiles_resumed": t["tiles_resumed"],
               "tiles_restored": t.get("tiles_restored", []), "tiles_cleaned": t.get("tiles_cleaned", []),
               "seams_checked": t.get("seams_checked", []), "tiles_evaluated": t.get("tiles_evaluated", []),
               "missing": len(t["missing"]),
               "dir": _rel(ctx, Path(t["dir"])), "seconds": t["seconds"], "peak_rss_mb": t["peak_rss_mb"]}
    ctx.progress(1.0, f"{len(t['tiles_run'])} tile(s) optimised")
    return IntentResult(summary=summary, evidence=[{"kind": "litho.tiles", "schema_version": resp["schema_version"],
                                                    "tiling": {**summary, "plan": t["plan"]}, "ilt": resp["ilt"]}],
                        metrics={"tiles_run": len(t["tiles_run"]), "tiles_resumed": len(t["tiles_resumed"])})


def _committed_masks(ctx: IntentContext) -> list[tuple[Path, Any, Any, Any]]:
    """(report path, its JSON, layout path, mask path) for every *.litho.json naming a mask;
    (report path, None, the parse error, None) for an unreadable one."""
    reports = sorted(p for p in ctx.scratch.rglob("*" + METRICS_SUFFIX) if ".git" not in p.parts)
    out: list[tuple[Path, Any, Any, Any]] = []
    for rp in reports:
        try:
            rep = json.loads(rp.read_text())
        except json.JSONDecodeError as exc:
            out.append((rp, None, str(exc), None))
            continue
        if "mask" not in rep or "layout" not in rep:
            continue  # an evaluate report without a committed mask
        base = rp.parent
        layout = (base / rep["layout"]) if not Path(rep["layout"]).is_absolute() else Path(rep["layout"])
        mask = (base / rep["mask"]) if not Path(rep["mask"]).is_absolute() else Path(rep["mask"])
        if not layout.exists():
            layout = ctx.scratch / rep["layout"]
        if not mask.exists():
            mask = ctx.scratch / rep["mask"]
        out.append((rp, rep, layout, mask))
    return out


def _suite_request(ctx: IntentContext, rep: dict[str, Any], layout: Path, mask: Path) -> dict[str, Any]:
    req = {"layout": str(layout), "mask": str(mask), "fill": rep.get("fill", "lithobench")}
    if ctx.action.get("kernels"):
        req["kernels"] = str(_path(ctx, ctx.action["kernels"]))
    return req


def _suite_result(kind: str, checks: list[dict[str, Any]], metrics: dict[str, Any]) -> IntentResult:
    passed = all(c["passed"] for c in checks)
    summary = {"passed": passed, "checked": len(checks), "failed": [c for c in checks if not c["passed"]]}
    return IntentResult(summary=summary, evidence=[{"kind": kind, "checks": checks}],
                        metrics={**metrics, "masks_checked": len(checks), "masks_failed": len(summary["failed"])})


def _readable(ctx: IntentContext, todo: list, checks: list[dict[str, Any]]):
    """The committed masks whose report could be read; each unreadable one is a failed check."""
    for rp, rep, layout, mask in todo:
        ctx.token.check()
        if rep is None:
            checks.append({"report": _rel(ctx, rp), "passed": False, "reason": f"unreadable: {layout}"})
            continue
        yield rp, rep, layout, mask


def resimulate(ctx: IntentContext) -> IntentResult:
    """Validation suite: every committed mask in a *.litho.json report must reproduce its L2 and PVB exactly."""
    checks: list[dict[str, Any]] = []
    todo = _committed_masks(ctx)
    for rp, rep, layout, mask in _readable(ctx, todo, checks):
        resp = api.evaluate(_suite_request(ctx, rep, layout, mask), ctx.token)
        want, got = rep["metrics"], resp["metrics"]
        ok = want["l2_nm2"] == got["l2_nm2"] and want["pvb_nm2"] == got["pvb_nm2"]
        checks.append({"report": _rel(ctx, rp), "mask": _rel(ctx, mask), "passed": ok,
                       "expected": {"l2_nm2": want["l2_nm2"], "pvb_nm2": want["pvb_nm2"]},
                       "got": {"l2_nm2": got["l2_nm2"], "pvb_nm2": got["pvb_nm2"]}})
        ctx.progress(len(checks) / len(todo), f"resimulated {_rel(ctx, rp)}")
    return _suite_result("litho.resim", checks, {})


def topology(ctx: IntentContext) -> IntentResult:
    """Validation suite: no committed mask may print a bridge, open, extra or missing shape at any corner."""
    checks: list[dict[str, Any]] = []
    defects = 0
    todo = _committed_masks(ctx)
    for rp, rep, layout, mask in _readable(ctx, todo, checks):
        req = {**_suite_request(ctx, rep, layout, mask), **_window_keys(ctx.action)}
        resp = api.evaluate(req, ctx.token)
        m = resp["metrics"]
        defects += m["topology_defects"]
        checks.append({"report": _rel(ctx, rp), "mask": _rel(ctx, mask), "passed": m["topology_defects"] == 0,
                       "corners": m["corners"], "topology": m["topology"]})
        ctx.progress(len(checks) / len(todo), f"topology of {_rel(ctx, rp)}")
    return _suite_result("litho.topology", checks, {"topology_defects": defects})
