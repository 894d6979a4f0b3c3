"""The detailed report (violations[]) of a tiled layout is made tile by tile, as the aggregates are.

The L2 and PVB error regions are found per core and joined across cores with union-find, with
the 8-connectivity KLayout gives a raster's merged polygons, so every piece knows the box of the
whole region it belongs to (what dedup groups by). The streamed records equal the stitched
canvas's, record for record, and the evaluation never allocates a canvas-sized array.
"""
from __future__ import annotations

import tracemalloc

import numpy as np
from hypothesis import given, settings, strategies as st

from worker_sdk.litho import api
from worker_sdk.litho.engine import Evaluation, plan_tiles, region_records
from worker_sdk.litho.layout import Layout, raster_to_region
from worker_sdk.litho.metrics import label_components
from worker_sdk.litho.process import DEFAULT
from worker_sdk.litho.streaming import evaluate_streaming
from worker_sdk.litho.topostream import RegionStitcher


def _blobs(seed: int, shape: tuple[int, int], density: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.random(shape) < density


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), h=st.integers(1, 24), w=st.integers(1, 24), density=st.floats(0.05, 0.7))
def test_diagonal_labels_are_the_polygons_klayout_merges(seed, h, w, density):
    img = _blobs(seed, (h, w), density)
    lab = label_components(img, diagonal=True)
    mine = sorted((tuple(int(v) for v in lab.bbox[k]), int(lab.area[k])) for k in range(1, lab.n + 1))
    theirs = sorted(((p.bbox().left, p.bbox().bottom, p.bbox().right, p.bbox().top), int(p.area()))
                    for p in raster_to_region(img).each())
    assert mine == theirs


def _canvas_eval(err_l2: np.ndarray, err_pvb: np.ndarray, core: int) -> Evaluation:
    """A stitched-canvas evaluation whose L2 and PVB error images are the ones given."""
    h, w = err_l2.shape
    tiles = plan_tiles(w, h, core + 2, 1)
    printed = {"nominal": err_l2.copy(), "max": err_pvb.copy(), "min": np.zeros_like(err_pvb)}
    return Evaluation("lithobench", (0, 0), (h, w), np.zeros((h, w), dtype=np.uint8), np.zeros((h, w), dtype=np.uint8),
                      printed, tiles, DEFAULT)


def _stitched(ev: Evaluation, rule: str) -> list[dict]:
    """The error regions of `ev` found core by core, in row-major order as the fold adds them."""
    err = ev.printed["nominal"] if rule == "l2" else ev.printed["max"]
    stitcher = RegionStitcher()
    for t in ev.tiles:
        x0, y0, x1, y1 = t.core
        stitcher.add(t, err[y0:y1, x0:x1])
    return stitcher.finish()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), rows=st.integers(1, 4), cols=st.integers(1, 4), core=st.integers(1, 7),
       density=st.floats(0.1, 0.6))
def test_region_pieces_joined_core_by_core_equal_the_stitched_canvas(seed, rows, cols, core, density):
    shape = (rows * core, cols * core)
    ev = _canvas_eval(_blobs(seed, shape, density), _blobs(seed + 1, shape, density), core)
    for rule in ("l2", "pvb"):
        assert _stitched(ev, rule) == region_records(ev, rule)


def test_a_region_joined_only_at_a_core_corner_is_one_group():
    # two pixels touching at the corner where four cores meet: one polygon on the canvas
    err = np.zeros((4, 4), dtype=bool)
    err[1, 1] = err[2, 2] = True  # cores are 2 x 2: (1, 1) in T_0_0, (2, 2) in T_1_1
    ev = _canvas_eval(err, err[:, ::-1].copy(), 2)  # and the anti-diagonal (T_0_1 / T_1_0) for PVB
    for rule in ("l2", "pvb"):
        got = _stitched(ev, rule)
        assert len(got) == 2 and all(r["group_bbox"] == [1, 1, 3, 3] for r in got)
        assert got == region_records(ev, rule)


def test_the_streamed_detailed_report_equals_the_whole_canvas_record_for_record(iccad13, tmp_path, litho_env):
    from .test_tiled import two_clips, write_oas

    lay = str(write_oas(two_clips(iccad13), tmp_path / "two.oas"))
    whole = api.evaluate({"layout": lay, "streaming": False, "report_level": "detailed"})
    streamed = api.evaluate({"layout": lay, "streaming": True, "report_level": "detailed"})
    assert streamed["metrics"] == whole["metrics"]
    assert streamed["degraded_to_aggregate"] is False and streamed["violation_count"] == whole["violation_count"] > 0
    assert streamed["violations"] == whole["violations"]  # ids, groups, canonical and shadows, contexts
    areas = [v for v in whole["violations"] if v["rule_id"] in ("LITHO.L2.AREA", "LITHO.PVB.AREA")]
    assert len({v["violation_group_id"] for v in areas}) < len(areas)  # regions cut by a seam were grouped
    assert {v["context"]["tile_id"] for v in areas} == {f"T_{r}_{c}" for r in range(2) for c in range(3)}


def _strip(rows: int, cols: int, core: int) -> Layout:
    """Bars across every vertical seam of a rows x cols tile canvas (layout nm = canvas px)."""
    polys = []
    for r in range(rows):
        for c in range(cols):
            x, y = c * core + core - 20, r * core + 30
            polys.append(((x, y), (x + 40, y), (x + 40, y + 24), (x, y + 24)))
    return Layout(tuple(polys), "strip", "M1")


def _peak(model, layout: Layout) -> tuple[int, tuple[int, int]]:
    """Peak traced memory of a streamed detailed evaluation, and its canvas (height, width)."""
    tracemalloc.start()
    try:
        ev = evaluate_streaming(model, layout, halo=64, regions=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ev.regions["l2"] and ev.regions["pvb"]
    return peak, ev.canvas


def test_a_streamed_detailed_evaluation_never_holds_a_canvas(iccad13):
    import torch

    from worker_sdk.litho.forward import get_model

    model = get_model(iccad13, 256, dtype=torch.float32)  # 256 px windows, 128 px cores
    bars = _strip(2, 2, 128)
    _peak(model, bars)  # warm the model's caches
    small, (h0, w0) = _peak(model, bars)
    # the same shapes and one square far away: a canvas 8 times larger, about the same records
    far = Layout(bars.polygons + (((1100, 1100), (1140, 1100), (1140, 1140), (1100, 1140)),), "far", "M1")
    big, (h, w) = _peak(model, far)
    assert h * w >= 8 * h0 * w0
    # the working memory is that of one tile: it does not grow with the canvas by even one
    # byte per pixel (as a bool canvas-sized array would make it)
    assert big - small < (h * w - h0 * w0) // 4, (small, big, h * w)
