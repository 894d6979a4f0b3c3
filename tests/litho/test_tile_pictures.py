"""Pictures of a tiled mask drawn tile by tile (worker_sdk.litho.tilepictures).

Every tile gets its picture and the report's tile map links to it; the prints come from the tile
folder's evaluation records where they fit the committed mask (nothing is simulated then), and
from a simulation of the tile's own window where a record does not fit (a tampered record never
reaches a picture). The memory is that of one tile, whatever the tile count (numpy's allocations,
traced). The slow test compares the pictures with the whole-canvas ones on a real tiled mask.
"""
from __future__ import annotations

import io
import json
import re
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from worker_sdk.litho import tiled
from worker_sdk.litho.layout import Layout, load_layout
from worker_sdk.litho.pictures import CROP_SIZE, SIZE, render_whole, tile_name
from worker_sdk.litho.process import DEFAULT
from worker_sdk.litho.streaming import PolygonIndex, TileEval, core_raster, window_raster
from worker_sdk.litho.tilepictures import overview_box, render_tiled

from .test_eval_in_waves import NoSimulation

OVERVIEW = ("target", "mask", "print_nominal", "print_max", "print_min", "violations")


def lines(width: int, height: int) -> Layout:
    """Vertical 60 nm lines at a 200 nm pitch filling width x height nm (many tiles, cheap to raster)."""
    polys = tuple(((x, 0), (x + 60, 0), (x + 60, height), (x, height)) for x in range(0, width - 60, 200))
    return Layout(polys, "lines", "M1")


def fake_records(root: Path, layout: Layout, plan, model, *, prints=None) -> None:
    """Evaluation records bound to `layout` as its own mask; each tile's prints are its target
    (or `prints(tile, target)`): records that fit the mask, without any simulation."""
    mindex, tindex = PolygonIndex(layout), PolygonIndex(layout)
    digests = {t.tile_id: tiled.core_digest(core_raster(mindex, "exact", plan.shift, t)) for t in plan.tiles}
    for t in plan.tiles:
        tgt = core_raster(tindex, plan.fill, plan.shift, t).astype(bool)
        made = prints(t, tgt) if prints else tgt
        te = TileEval(t.tile_id, tgt, {c.name: made for c in DEFAULT.simulated}, [], 0, np.zeros(0, dtype=np.int64))
        rec = tiled.eval_record(t, model, DEFAULT, {c: digests[c] for c in tiled.eval_cores(plan, t)}, te, te)
        (root / "evals").mkdir(parents=True, exist_ok=True)
        (root / "evals" / f"{t.tile_id}.json").write_text(json.dumps(rec))


def per_tile_rows(plan) -> list[dict]:
    dx, dy = plan.shift
    return [{"tile_id": t.tile_id, "row": t.row, "col": t.col,
             "core_nm": [t.core[0] - dx, t.core[1] - dy, t.core[2] - dx, t.core[3] - dy],
             "l2_before_nm2": 10, "l2_nm2": 0, "pvb_nm2": 0, "epe_violations": 0} for t in plan.tiles]


def _streamed_peak(model64, tmp_path: Path, width: int, height: int) -> tuple[int, object, object]:
    layout = lines(width, height)
    plan = tiled.plan_layout(layout, model64, "lithobench")
    root = tmp_path / f"tiles-{plan.rows}x{plan.cols}"
    fake_records(root, layout, plan, model64)
    ghost = NoSimulation(model64)  # any simulation fails the test: every tile comes from its record
    tracemalloc.start()
    try:
        res = render_tiled(ghost, layout, layout, tmp_path / f"png-{plan.rows}x{plan.cols}", tile_dir=root,
                           tiles=per_tile_rows(plan), window=DEFAULT)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, plan, res


def test_streamed_pictures_cover_every_tile_from_records_with_memory_flat_in_the_tile_count(model64, tmp_path):
    # 3 x 3 tiles and 3 x 7 tiles: the larger canvas holds 12 M more pixels, which a whole-canvas
    # picture of it pays about 18.5 bytes each for (over 200 MB); streamed, the peak stays that of a tile
    small, plan_s, res_s = _streamed_peak(model64, tmp_path, 1900, 1900)
    large, plan_l, res_l = _streamed_peak(model64, tmp_path, 6000, 1900)
    assert (plan_s.rows, plan_s.cols) == (3, 3) and (plan_l.rows, plan_l.cols) == (3, 7)
    for plan, res in ((plan_s, res_s), (plan_l, res_l)):
        assert res.simulated == [] and sorted(res.from_records) == sorted(t.tile_id for t in plan.tiles)
        names = {p.stem for p in res.written}
        assert names == set(OVERVIEW) | {tile_name(t.tile_id) for t in plan.tiles}
        for p in res.written:
            side = SIZE if p.stem in OVERVIEW else CROP_SIZE
            assert Image.open(p).size == (side, side), p
    canvas_growth = (plan_l.canvas[0] * plan_l.canvas[1] - plan_s.canvas[0] * plan_s.canvas[1])
    assert large - small < 0.05 * canvas_growth, (small, large)  # far under a byte per added canvas pixel
    one_window = plan_l.clip * plan_l.clip
    # the overview counters and one core's layers and colours: under 16 bytes a window pixel, where the
    # whole canvas of the larger layout takes about 18.5 bytes a canvas pixel (5 windows' worth of pixels)
    assert large < 16 * one_window, large


def test_the_tile_map_links_every_tile_to_its_streamed_picture(model64, tmp_path):
    from coordinator.report.tilemap import tile_cells, tile_map_html

    layout = lines(1900, 1900)
    plan = tiled.plan_layout(layout, model64, "lithobench")
    fake_records(tmp_path / "tiles", layout, plan, model64)
    res = render_tiled(NoSimulation(model64), layout, layout, tmp_path / "png", tile_dir=tmp_path / "tiles",
                       tiles=per_tile_rows(plan), window=DEFAULT)
    images = {p.stem: p.read_bytes() for p in res.written}
    html = tile_map_html("lines", tile_cells(per_tile_rows(plan)), images)
    links = re.findall(r'<a href="#(tile-[^"]+)" data-tile="([^"]+)"', html)
    assert len(links) == len(plan.tiles) == 9
    for anchor, tile_id in links:
        block = re.search(rf'<div class="tile" id="{re.escape(anchor)}">(.*?)</div>', html, re.S)
        assert block is not None and "data:image/png;base64," in block.group(1), tile_id


def _white(path: Path) -> int:
    img = np.asarray(Image.open(path).convert("RGB")).astype(int)
    return int((img.min(axis=2) >= 250).sum())


def test_a_record_that_does_not_fit_the_committed_mask_is_simulated_not_pictured(model64, tmp_path):
    # Two forged records, each claiming every pixel of its core prints: T_0_0's names a core digest
    # that is not the committed mask's (a record made for another mask); T_0_1's names the right
    # digests but its prints do not count to the tile's reported L2. Neither may reach a picture:
    # both tiles are simulated on their own window instead; every other tile comes from its record.
    layout = lines(1900, 1900)
    plan = tiled.plan_layout(layout, model64, "lithobench")
    root = tmp_path / "tiles"
    forged = {"T_0_0", "T_0_1"}
    fake_records(root, layout, plan, model64,
                 prints=lambda t, tgt: np.ones_like(tgt) if t.tile_id in forged else tgt)
    rec = json.loads((root / "evals" / "T_0_0.json").read_text())
    rec["mask_cores"]["T_1_1"] = "sha256:" + "0" * 64
    (root / "evals" / "T_0_0.json").write_text(json.dumps(rec))
    rows = per_tile_rows(plan)
    for r in rows:
        r.pop("l2_nm2") if r["tile_id"] == "T_0_0" else None  # T_0_0 is caught by its digest alone
    res = render_tiled(model64, layout, layout, tmp_path / "png", tile_dir=root, tiles=rows, window=DEFAULT)
    assert sorted(res.simulated) == sorted(forged)
    assert sorted(res.from_records) == sorted(t.tile_id for t in plan.tiles if t.tile_id not in forged)
    honest = _white(tmp_path / "png" / f"{tile_name('T_1_1')}.png")
    for tid in forged:  # a forged all-printing core would leave no white pixel; the simulated one leaves many
        assert _white(tmp_path / "png" / f"{tile_name(tid)}.png") > honest // 4, tid


def test_the_overview_frame_from_geometry_is_the_whole_canvas_frame(model64):
    from worker_sdk.litho.drawing import pattern_box

    layout = lines(1900, 1700)
    plan = tiled.plan_layout(layout, model64, "lithobench")
    h, w = plan.canvas
    tindex = PolygonIndex(layout)
    target = np.zeros((h, w), dtype=bool)
    mask = np.zeros((h, w), dtype=bool)
    for t in plan.tiles:
        x0, y0, x1, y1 = t.core
        target[y0:y1, x0:x1] = core_raster(tindex, "lithobench", plan.shift, t)
        mask[y0:y1, x0:x1] = core_raster(tindex, "exact", plan.shift, t)
        ys, xs = tiled._core_slices(t)  # a core raster is the window raster's core
        assert np.array_equal(window_raster(tindex, "lithobench", plan.clip, plan.shift, t)[ys, xs],
                              target[y0:y1, x0:x1])
    assert overview_box(layout, layout, "lithobench", plan.shift, plan.canvas) == pattern_box(target, mask)


@pytest.mark.slow
def test_streamed_pictures_equal_the_whole_canvas_ones_on_a_real_tiled_mask(model64, iccad13, tmp_path):
    # clips 4 and 1 side by side (2 x 3 tiles), their cores' clean mask stitched and committed, each
    # tile evaluated in the waves (float64, as the tile tasks do); then the whole-canvas pictures
    # against the streamed ones, which simulate nothing
    from .test_eval_in_waves import _clean_store

    layout, plan, cfg, rules, index, store = _clean_store(tmp_path, model64, iccad13)
    for t in plan.tiles:
        tiled.evaluate_tiles(model64, plan, store, index, [t.tile_id], window=DEFAULT)
    mask_file = tmp_path / "mask.oas"
    tiled.write_mask(plan, store, mask_file)
    mask_layout = load_layout(mask_file)
    rows = per_tile_rows(plan)
    for r in rows:  # the fake rows' figures are not these tiles'
        r.pop("l2_nm2"), r.pop("pvb_nm2")
    x0, y0, x1, y1 = layout.bbox()
    crops = [{"x_nm": (x0 + x1) // 2, "y_nm": (y0 + y1) // 2}, {"x_nm": x0 + 50, "y_nm": y0 + 50}]
    whole = render_whole(model64, layout, tmp_path / "whole", mask_layout=mask_layout, crops=crops, tiles=rows)
    res = render_tiled(NoSimulation(model64), layout, mask_layout, tmp_path / "streamed", tile_dir=store.root,
                       crops=crops, tiles=rows, window=DEFAULT)
    assert res.simulated == [] and len(res.from_records) == len(plan.tiles)
    assert sorted(p.name for p in whole) == sorted(p.name for p in res.written)
    for p in whole:
        a = np.asarray(Image.open(p).convert("RGB")).astype(int)
        b = np.asarray(Image.open(tmp_path / "streamed" / p.name).convert("RGB")).astype(int)
        assert a.shape == b.shape, p.name
        if p.stem.startswith(("tile_", "crop_")):  # the same prints drawn the same way: the same pixels
            assert np.array_equal(a, b), p.name
        else:  # overviews: a box filter where the whole canvas is resized bilinearly
            assert np.abs(a - b).mean() < 6.0, (p.name, np.abs(a - b).mean())


def test_the_report_draws_a_tiled_mask_from_its_committed_tile_folder(model64, litho_env, tmp_path):
    # the report's renderer on a commit: the layout, the mask and the tile folder's records go to a
    # child process, which draws every tile from its record (the records are the committed mask's;
    # here they say every pixel prints, which no simulation would: blue all over each tile)
    from coordinator.report.build import _inside, _render_pictures
    from tests.conftest import git

    from .test_tiled import write_oas

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    layout = lines(1900, 1900)
    write_oas(layout, repo / "layout.oas")
    write_oas(layout, repo / "mask.oas")
    plan = tiled.plan_layout(layout, model64, "lithobench")
    fake_records(repo / "mask.tiles", layout, plan, model64, prints=lambda t, tgt: np.ones_like(tgt))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "tiled mask")
    rows = [{k: v for k, v in r.items() if k not in ("l2_nm2", "pvb_nm2")} for r in per_tile_rows(plan)]
    images = _render_pictures(str(repo), "HEAD", "layout.oas", "mask.oas", None, [], rows, "mask.tiles")
    assert set(images) == set(OVERVIEW) | {tile_name(t.tile_id) for t in plan.tiles}
    for k, png in images.items():
        img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
        assert img.shape[:2] == ((CROP_SIZE, CROP_SIZE) if k.startswith("tile_") else (SIZE, SIZE)), k
        if k.startswith("tile_"):  # the records' prints, not a simulation's (the scale bar's plate aside)
            assert ((img[..., 2] - img[..., 0]) > 30).mean() > 0.9, k
    # a tile folder named outside the checkout is not read
    assert _inside("mask.tiles") and not _inside("../mask.tiles") and not _inside("/tmp/mask.tiles")
