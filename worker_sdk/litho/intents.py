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
- litho.resim (validation suite; params corners?, pvb_grid?, kernels?, threads?):
  re-simulates every committed mask once and requires every figure the
  committed reports state about it exactly: a mask's `*.litho.json` (all its
  metrics, the mask file's digest, its tiles' scores; and what it states of the
  target, `baseline_metrics` and each tile's `l2_before_nm2`, against one
  simulation of the target as its own mask) and each evaluation
  report (`*.evaluate.json`, or a `*.litho.json` of `tool` evaluate: metrics,
  violation count, the listed violations, provenance), found by the digests it
  recorded. resim.py says which figures; a failed check names each figure with
  the expected and the got value; summary.passed says whether all passed.
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

from registry.canonical import digest_bytes
from registry.errors import DomeError
from worker_sdk.intents import IntentContext, IntentFailed, IntentResult

from . import api, resim
from .engine import DEFAULT_HALO
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
    out: list[tuple[Path, Any, Any, Any]] = []
    for rp, rep in _committed_reports(ctx, (METRICS_SUFFIX,)):
        if rep is None or isinstance(rep, str):
            out.append((rp, None, rep, None))
        elif isinstance(rep, dict) and "mask" in rep and "layout" in rep:
            layout, mask = _report_file(ctx, rp, rep["layout"]), _report_file(ctx, rp, rep["mask"])
            out.append((rp, rep, layout, mask))
        # else an evaluate report, or another file: no committed mask of its own
    return out


def _committed_reports(ctx: IntentContext, suffixes: tuple[str, ...]):
    """(path, JSON or the parse error's text) of every committed file whose name ends with one of `suffixes`."""
    for rp in sorted(p for p in ctx.scratch.rglob("*.json") if ".git" not in p.parts and p.name.endswith(suffixes)):
        try:
            yield rp, json.loads(rp.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            yield rp, str(exc)


def _report_file(ctx: IntentContext, rp: Path, name: str) -> Path:
    """A file a *.litho.json names: from the checkout's root, as litho.optimize writes it (or
    absolute), else beside the report."""
    p = ctx.scratch / name  # an absolute name stays itself
    return p if p.exists() else rp.parent / name


def _suite_request(ctx: IntentContext, rep: dict[str, Any], layout: Path, mask: Path) -> dict[str, Any]:
    req = {"layout": str(layout), "mask": str(mask), "fill": rep.get("fill", "lithobench")}
    if ctx.action.get("kernels"):
        req["kernels"] = str(_path(ctx, ctx.action["kernels"]))
    return req


def _suite_result(kind: str, checks: list[dict[str, Any]], metrics: dict[str, Any]) -> IntentResult:
    passed = all(c["passed"] for c in checks)
    summary = {"passed": passed, "checked": len(checks), "failed": [c for c in checks if not c["passed"]]}
    masks = [c for c in checks if "target" not in c]  # litho.resim also checks what a report says of its target
    counts = {"masks_checked": len(masks), "masks_failed": sum(not c["passed"] for c in masks)}
    if len(masks) < len(checks):
        counts |= {"targets_checked": len(checks) - len(masks),
                   "targets_failed": len(summary["failed"]) - counts["masks_failed"]}
    return IntentResult(summary=summary, evidence=[{"kind": kind, "checks": checks}], metrics={**metrics, **counts})


def _readable(ctx: IntentContext, todo: list, checks: list[dict[str, Any]]):
    """The committed masks whose report could be read; each unreadable one is a failed check."""
    for rp, rep, layout, mask in todo:
        ctx.token.check()
        if rep is None:
            checks.append({"report": _rel(ctx, rp), "passed": False, "reason": f"unreadable: {layout}"})
            continue
        yield rp, rep, layout, mask


def resimulate(ctx: IntentContext) -> IntentResult:
    """Validation suite: every figure a committed report states about a mask must come out of its
    re-simulation exactly (resim.py says which); each mask is simulated once for all its reports."""
    checks: list[dict[str, Any]] = []
    jobs = _resim_jobs(ctx, checks)
    simulated = 0
    for n, ((layout, mask, fill, halo), reports) in enumerate(jobs.items()):
        ctx.token.check()
        detailed = any(resim.is_evaluation_report(rep) and rep.get("report_level") == "detailed"
                       for _, rep in reports)
        req: dict[str, Any] = {"layout": layout, "fill": fill, "report_level": "detailed" if detailed else "aggregate",
                               "halo_nm": halo, **_window_keys(ctx.action)}
        if mask:
            req["mask"] = mask
        if ctx.action.get("kernels"):
            req["kernels"] = str(_path(ctx, ctx.action["kernels"]))
        try:
            resp, tiles = api.evaluate_scored(req, ctx.token)
        except DomeError as exc:  # a mask or layout the engine cannot read: no report about it is vouched for
            checks += [resim.failed(_rel(ctx, rp), _rel(ctx, Path(mask)) if mask else None,
                                    f"not re-simulated: {exc.code}: {exc}") for rp, _ in reports]
            continue
        simulated += 1
        resp, tiles = json.loads(api.dumps(resp)), json.loads(json.dumps(tiles))  # JSON types, as the reports hold
        for rp, rep in reports:
            if resim.is_evaluation_report(rep):
                stated, got = resim.evaluation_figures(rep, resp)
            elif not mask:  # a mask's report, against its target's simulation
                stated, got = resim.target_figures(rep, resp, tiles)
                checks.append({**resim.check(_rel(ctx, rp), None, stated, got), "target": _rel(ctx, Path(layout))})
                continue
            else:
                digest = digest_bytes(Path(mask).read_bytes()) if "mask_file_digest" in rep else ""
                stated, got = resim.litho_figures(rep, resp, tiles, digest)
            checks.append(resim.check(_rel(ctx, rp), _rel(ctx, Path(mask)) if mask else None, stated, got))
        ctx.progress((n + 1) / len(jobs), f"resimulated {_rel(ctx, Path(mask or layout))}")
    checks.sort(key=lambda c: c["report"])
    return _suite_result("litho.resim", checks, {"simulations": simulated})


def _resim_jobs(ctx: IntentContext, checks: list[dict[str, Any]]) -> dict[tuple[str, str, str, int], list[tuple[Path, Any]]]:
    """The committed reports grouped by what a re-simulation needs (layout, mask, fill, the tile
    halo): one simulation each. A report that cannot be read, or whose files are not in the
    checkout, is a failed check."""
    jobs: dict[tuple[str, str, str, int], list[tuple[Path, Any]]] = {}
    digests: dict[Path, str] = {}
    for rp, rep in _committed_reports(ctx, (METRICS_SUFFIX, resim.EVALUATE_SUFFIX)):
        rel = _rel(ctx, rp)
        if isinstance(rep, str):
            checks.append(resim.failed(rel, None, f"unreadable: {rep}"))
        elif resim.is_evaluation_report(rep):
            prov = rep.get("provenance") if isinstance(rep.get("provenance"), dict) else {}
            layout = _recorded_file(ctx, prov.get("layout"), digests)
            mask_desc = prov.get("mask") if isinstance(prov.get("mask"), dict) else {}
            mask = None if mask_desc.get("kind") == "target" else _recorded_file(ctx, mask_desc, digests)
            if layout is None or (mask is None and mask_desc.get("kind") != "target"):
                what = "layout" if layout is None else "mask"
                checks.append(resim.failed(rel, None, f"no committed file is the evaluated {what}",
                                           expected={f"provenance.{what}": prov.get(what)}))
                continue
            key = (str(layout), str(mask) if mask else "", str(prov.get("fill", "lithobench")), DEFAULT_HALO)
            jobs.setdefault(key, []).append((rp, rep))
        elif isinstance(rep, dict) and "mask" in rep and "layout" in rep:
            if not (isinstance(rep["layout"], str) and isinstance(rep["mask"], str)):
                checks.append(resim.failed(rel, None, "layout and mask must be paths"))
                continue
            layout, mask = (_report_file(ctx, rp, rep[k]).resolve() for k in ("layout", "mask"))
            if not (layout.is_file() and mask.is_file()):
                checks.append(resim.failed(rel, rep["mask"], "the layout or the mask it names is not in the checkout"))
                continue
            key = (str(layout), str(mask), str(rep.get("fill", "lithobench")), resim.tile_halo(rep, DEFAULT_HALO))
            jobs.setdefault(key, []).append((rp, rep))
            if resim.states_target_figures(rep):  # the target printed as its own mask: no mask in the key
                jobs.setdefault((key[0], "", key[2], key[3]), []).append((rp, rep))
        elif rp.name.endswith(resim.EVALUATE_SUFFIX):
            checks.append(resim.failed(rel, None, "not an evaluation report (its tool is not evaluate)"))
    return jobs


def _recorded_file(ctx: IntentContext, desc: Any, digests: dict[Path, str]) -> Path | None:
    """The committed file an evaluation's provenance names ({path, digest}): the recorded path
    itself, else its longest tail under the checkout (the evaluating worker had its own checkout),
    whose bytes have the recorded digest; None if there is none."""
    if not isinstance(desc, dict) or not isinstance(desc.get("path"), str) or not desc.get("digest"):
        return None
    recorded = Path(desc["path"])
    root = ctx.scratch.resolve()
    tails = [Path(*recorded.parts[i:]) for i in range(len(recorded.parts)) if not Path(*recorded.parts[i:]).is_absolute()]
    candidates = ([recorded] if recorded.is_absolute() else []) + [root / t for t in tails]
    for c in candidates:
        full = c.resolve()
        if c is not recorded and root not in full.parents:
            continue  # a tail with .. that leaves the checkout
        if full.is_file():
            if full not in digests:
                digests[full] = digest_bytes(full.read_bytes())
            if digests[full] == desc["digest"]:
                return full
    return None


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
