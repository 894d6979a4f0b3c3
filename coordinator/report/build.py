"""Assemble a run report: ledger events -> model, plus litho pictures.

Pictures of litho clips need the litho engine (torch), which the coordinator
never imports: they are rendered by `python -m worker_sdk.litho.pictures` in a
child process, from the mask and layout files of the run's integration head.
"""
from __future__ import annotations

import csv
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from coordinator.integration.recorder import readable_payload
from registry.datasets import iccad13_data

from .html import ClipSection, render_html
from .model import ReportModel, build_model
from .tilemap import tile_cells, tile_map_html

if TYPE_CHECKING:
    from ledger import Ledger


@dataclass
class Report:
    model: ReportModel
    clips: list[ClipSection]
    html: str


def _git_show(repo: str, rev: str, path: str) -> bytes | None:
    r = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=repo, capture_output=True)
    return r.stdout if r.returncode == 0 else None


def published_rows(csv_path: Path | None, test_no: int | None) -> list[dict[str, Any]]:
    """The best published row per method family for one ICCAD 2013 test case."""
    if csv_path is None or test_no is None or not csv_path.is_file():
        return []
    with csv_path.open() as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("test") == str(test_no)]
    return sorted(rows, key=lambda r: int(r["L2_nm2"]) + int(r["PVB_nm2"]))[:4]


def _published_csv() -> Path | None:
    data = iccad13_data()
    if data is not None and (data / "published_results.csv").is_file():
        return data / "published_results.csv"
    return None


MAX_CROPS = 12  # close-ups per mask (the renderer's own limit too)


def pick_markers(violations: list[Any], limit: int = MAX_CROPS) -> list[dict[str, Any]]:
    """Up to `limit` DRC markers to show close up, every rule represented before
    any rule gets a second one; in rule order, then by position; two markers of
    one rule at the same place are one close-up (pure)."""
    by_rule: dict[str, list[dict[str, Any]]] = {}
    seen: set[tuple[str, float, float]] = set()
    for v in violations:
        loc = v.get("location_nm") if isinstance(v, dict) else None
        if not (isinstance(loc, list) and len(loc) == 2):
            continue
        place = (str(v.get("rule_id", "")), float(loc[0]), float(loc[1]))
        if place in seen:
            continue
        seen.add(place)
        by_rule.setdefault(str(v.get("rule_id", "")), []).append(
            {"rule_id": str(v.get("rule_id", "")), "x_nm": float(loc[0]), "y_nm": float(loc[1])})
    queues = [sorted(by_rule[r], key=lambda m: (m["x_nm"], m["y_nm"])) for r in sorted(by_rule)]
    out: list[dict[str, Any]] = []
    while len(out) < limit and any(queues):
        for q in queues:
            if q and len(out) < limit:
                out.append(q.pop(0))
    return out


def drc_markers(model: ReportModel, get_blob: Callable[[str], bytes]) -> None:
    """Read each DRC task's violations (a blob the ledger's evidence names) and
    keep the markers to show close up, as `picked` on its model.drc entry."""
    for d in model.drc:
        d["picked"] = []
        if not d.get("violations_digest") or not d.get("markers"):
            continue
        try:
            doc = json.loads(get_blob(str(d["violations_digest"])))
        except Exception:  # noqa: BLE001 - a missing or unreadable blob leaves the counts, without close-ups
            continue
        d["picked"] = pick_markers(list(doc.get("violations") or []))
        d["points"] = [(float(v["location_nm"][0]), float(v["location_nm"][1])) for v in doc.get("violations") or []
                       if isinstance(v, dict) and isinstance(v.get("location_nm"), list) and len(v["location_nm"]) == 2]


def _render_pictures(repo: str, rev: str, layout_path: str, mask_path: str,
                     kernels: str | None, crops: list[dict[str, Any]] = (),
                     tiles: list[dict[str, Any]] = (), tile_dir: str | None = None) -> dict[str, bytes]:
    """Run the litho picture renderer in a child process on files of `rev`;
    {} when the engine is unavailable. The kernels are the repository's own
    when it pins them (the optics the masks were made for). `crops` are points
    (mask layout nm) to show close up: they come back as crop_00, crop_01, ...
    `tiles` (a tiled mask's per-tile rows) come back as tile_<id>; with
    `tile_dir`, the tile folder's evaluation records (`evals/`) go along and the
    renderer draws tile by tile, taking prints from the records that fit the mask."""
    with tempfile.TemporaryDirectory(prefix="dome-report-") as tmp:
        t = Path(tmp)
        paths = [layout_path, mask_path] + ([kernels] if kernels else [])
        evals = f"{tile_dir.rstrip('/')}/evals" if tile_dir and _inside(tile_dir) else None
        evals = evals if evals and _tree_exists(repo, rev, evals) else None
        if not _extract(repo, rev, paths + ([evals] if evals else []), t):
            return {}
        out = t / "out"
        argv = [sys.executable, "-m", "worker_sdk.litho.pictures", "--layout", str(t / layout_path),
                "--mask", str(t / mask_path), "--out", str(out)]
        if kernels:
            argv += ["--kernels", str(t / kernels)]
        if crops:
            (t / "crops.json").write_text(json.dumps([{"x_nm": c["x_nm"], "y_nm": c["y_nm"]} for c in crops]))
            argv += ["--crops", str(t / "crops.json")]
        if tiles:  # a tiled mask: one picture per tile core; its figures let the renderer check the records
            (t / "tiles.json").write_text(json.dumps([{k: c[k] for k in ("tile_id", "core_nm", "l2_nm2", "pvb_nm2")
                                                       if k in c} for c in tiles]))
            argv += ["--tiles", str(t / "tiles.json")]
        if evals:
            argv += ["--tile-dir", str(t / tile_dir)]
        try:
            r = subprocess.run(argv, capture_output=True, timeout=picture_timeout_s(len(tiles)))
        except subprocess.TimeoutExpired:
            return {}
        if r.returncode != 0 or not out.is_dir():
            return {}
        return {p.stem: p.read_bytes() for p in sorted(out.glob("*.png"))}


def picture_timeout_s(tiles: int) -> int:
    """The renderer's time limit: 10 minutes, and 10 s more per tile (a tile without a usable
    evaluation record is simulated on its own window, a few seconds on a CPU)."""
    return 600 + 10 * max(0, int(tiles))


def _inside(path: str) -> bool:
    """A relative path that stays inside the checkout (no root, no `..`)."""
    p = Path(path)
    return not p.is_absolute() and ".." not in p.parts


def _tree_exists(repo: str, rev: str, path: str) -> bool:
    r = subprocess.run(["git", "ls-tree", "-d", "--name-only", rev, path], cwd=repo, capture_output=True, text=True)
    return r.returncode == 0 and bool(r.stdout.strip())


def _extract(repo: str, rev: str, paths: list[str], into: Path) -> bool:
    """`git archive` of `paths` at `rev`, piped into tar (a tile folder's records are streamed, not
    held here)."""
    arch = subprocess.Popen(["git", "archive", "--format=tar", rev, "--", *paths], cwd=repo, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    try:
        tar = subprocess.run(["tar", "-x", "-C", str(into)], stdin=arch.stdout, capture_output=True, timeout=600)
    finally:
        arch.stdout.close()
        rc = arch.wait(timeout=600)
    return rc == 0 and tar.returncode == 0


def _test_number(name: str) -> int | None:
    digits = "".join(ch if ch.isdigit() else " " for ch in name).split()
    return int(digits[-1]) if digits else None


Progress = Callable[[int, int, str], None]  # (done, total, what)


def _no_progress(done: int, total: int, what: str) -> None:
    pass


def litho_clips(model: ReportModel, *, pictures: bool, progress: Progress = _no_progress) -> list[ClipSection]:
    """One section per optimized clip: metrics from the task's evidence, the
    layout named by its committed metrics report, pictures from the head."""
    repo = model.manifest.get("repo")
    head = model.finished.get("head")
    csv_path = _published_csv()
    clips: list[ClipSection] = []
    todo = [ev for ev in model.evidence if ev.kind == "litho.optimize"]
    for i, ev in enumerate(todo):
        progress(i, len(todo), f"clip {ev.node_id}: {'rendering pictures' if pictures else 'metrics'}")
        files = ev.data.get("files") or {}
        report = {}
        if repo and head and files.get("metrics"):
            raw = _git_show(repo, head, files["metrics"])
            report = json.loads(raw) if raw else {}
        layout_path = report.get("layout") or files.get("layout")
        name = Path(layout_path).stem if layout_path else ev.node_id
        clip = ClipSection(name=name, metrics=dict(ev.data.get("metrics") or {}),
                           published=published_rows(csv_path, _test_number(name)),
                           iterations=(report.get("ilt") or {}).get("iterations"))
        kernels = (ev.data.get("provenance") or {}).get("kernels")
        kernels = kernels if isinstance(kernels, str) and not Path(kernels).is_absolute() else None
        per_tile = list((report.get("tiling") or {}).get("per_tile") or [])
        images: dict[str, bytes] = {}
        if pictures and repo and head and layout_path and files.get("mask") and report:
            checked = [d for d in model.drc if d.get("layout") == files["mask"] and d.get("picked")]
            points = [m for d in checked for m in d["picked"]][:MAX_CROPS]
            tile_dir = (report.get("tiling") or {}).get("dir")
            images = _render_pictures(repo, head, layout_path, files["mask"], kernels or _pinned_kernels(repo, head),
                                      points, per_tile, tile_dir if isinstance(tile_dir, str) and tile_dir else None)
            _attach_crops(checked, images)
            clip.images = {k: v for k, v in images.items() if not k.startswith(("crop_", "tile_"))}
        if per_tile:
            clip.tile_map = tile_map_html(name, tile_cells(per_tile, _drc_points(model, files.get("mask"))), images)
        clips.append(clip)
    return sorted(clips, key=lambda c: (_test_number(c.name) or 0, c.name))


def _drc_points(model: ReportModel, mask: str | None) -> list[tuple[float, float]]:
    """Where the DRC markers on one mask are (layout nm), for the tile map's counts."""
    return [p for d in model.drc if d.get("layout") == mask for p in d.get("points") or []]


def _attach_crops(checked: list[dict[str, Any]], images: dict[str, bytes]) -> None:
    """Hand crop_NN pictures back to the DRC entries whose markers they show, in order."""
    i = 0
    for d in checked:
        for marker in d["picked"]:
            png = images.get(f"crop_{i:02d}")
            if png is not None:
                d["crops"].append({**marker, "png": png})
            i += 1


def _pinned_kernels(repo: str, rev: str) -> str | None:
    return "kernels/iccad13" if _tree_exists(repo, rev, "kernels/iccad13") else None


def build_report(ledger: Ledger, ops_root: Path, run_id: str, *, pictures: bool = True,
                 progress: Progress = _no_progress) -> Report:
    progress(0, 0, "reading the ledger")
    events = [json.loads(json.dumps(r.to_json())) for r in ledger.events(run_id)]
    for e in events:  # integration records as signed: externalized artifacts and chained lists rebuilt
        e["payload"] = readable_payload(str(e.get("topic", "")), e.get("payload"), ledger.blobs)
    model = build_model(run_id, events)
    attach_diffs(model, ledger.blobs.get)
    drc_markers(model, ledger.blobs.get)
    clips = litho_clips(model, pictures=pictures, progress=progress)
    progress(len(clips), len(clips), "writing the page")
    return Report(model=model, clips=clips,
                  html=render_html(model, clips, quick_iterations=quick_iterations(ops_root, run_id)))


MAX_DIFF_CHARS = 200_000  # per proposal on the page; the rest is in the blob store


def attach_diffs(model: ReportModel, get_blob: Callable[[str], bytes]) -> None:
    """Each verified proposal's canonical diff (the blob its verdict names), for the page."""
    for row in model.proposals:
        if not row.diff_blob:
            continue
        try:
            text = get_blob(row.diff_blob).decode("utf-8", "replace")
        except Exception:  # noqa: BLE001 - a missing blob leaves the diff out, the page still renders
            continue
        row.diff = text if len(text) <= MAX_DIFF_CHARS else (
            text[:MAX_DIFF_CHARS] + f"\n... ({len(text) - MAX_DIFF_CHARS} more characters in blob {row.diff_blob})")


def quick_iterations(ops_root: Path, run_id: str) -> int | None:
    """The ILT iteration count the run's work queue set for its optimize tasks
    (a shortened schedule), or None when they ran the full default."""
    try:
        queue = json.loads((Path(ops_root) / "runs" / run_id / "work.queue.json").read_text())
    except (OSError, ValueError):
        return None
    counts = {int(t["action_spec"]["params"]["iterations"]) for t in queue.get("tasks", [])
              if isinstance(t, dict) and (t.get("action_spec") or {}).get("intent") == "litho.optimize"
              and ((t.get("action_spec") or {}).get("params") or {}).get("iterations")}
    return min(counts) if counts else None
