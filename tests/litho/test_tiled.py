"""Tiled ILT (plan, waves, tile folder, stitching, seam check) and streaming evaluation."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from worker_sdk.cancel import Cancelled
from worker_sdk.litho import api, tiled
from worker_sdk.litho.engine import evaluate
from worker_sdk.litho.errors import BadRequest
from worker_sdk.litho.layout import Layout, load_layout
from worker_sdk.litho.streaming import evaluate_streaming, sorted_records

from .conftest import glp
from tests.litho.conftest import CountingToken


def two_clips(iccad13: Path) -> Layout:
    """ICCAD 2013 clips 4 and 1 side by side, 300 nm apart: a 2 x 3 tile layout."""
    a, b = load_layout(glp(4, iccad13)), load_layout(glp(1, iccad13))
    x0, y0, x1, _ = a.bbox()
    bx0, by0, _, _ = b.bbox()
    return Layout(a.polygons + b.translated(x1 - bx0 + 300, y0 - by0 + 200).polygons, "clips 4 and 1", "M1")


def write_oas(layout: Layout, path: Path) -> Path:
    import klayout.db as kdb

    ly = kdb.Layout()
    ly.dbu = 0.001
    cell = ly.create_cell("TOP")
    li = ly.layer(1, 0)
    for p in layout.polygons:
        cell.shapes(li).insert(kdb.Polygon([kdb.Point(x, y) for x, y in p]))
    ly.write(str(path))
    return path


def small_block(iccad13: Path) -> Layout:
    """The lines of clip 4 inside a 900 nm square: one clip, tiled 2 x 2 when asked."""
    base = load_layout(glp(4, iccad13))
    x0, y0, _, _ = base.bbox()
    keep = [p for p in base.polygons if all(x0 <= x < x0 + 900 and y0 <= y < y0 + 900 for x, y in p)]
    assert len(keep) >= 3
    return Layout(tuple(keep), "clip 4 corner", "M1")


def test_plan_halo_is_the_optical_radius_and_waves_never_hold_neighbours(model32, iccad13):
    plan = tiled.plan_layout(two_clips(iccad13), model32, "lithobench")
    assert 440 <= plan.radius <= 464 and plan.halo == 512 and plan.core == 1024  # 99% of the kernels' energy
    assert (plan.rows, plan.cols) == (2, 3)
    cover = np.zeros(plan.canvas, dtype=np.int32)
    for t in plan.tiles:
        x0, y0, x1, y1 = t.core
        cover[y0:y1, x0:x1] += 1
        assert t.origin == (x0 - plan.halo, y0 - plan.halo) and t.origin[0] % 64 == 0
    assert (cover == 1).all()  # the cores partition the canvas
    waves = plan.waves()
    assert sorted(t.tile_id for w in waves for t in w) == sorted(t.tile_id for t in plan.tiles)
    for w in waves:
        for a in w:
            assert not any(b in w for b in plan.neighbours(a))
    with pytest.raises(BadRequest) as exc:
        tiled.plan_layout(two_clips(iccad13), model32, "lithobench", halo=100)
    assert exc.value.code == "LITHO_BAD_TILE_PLAN"


def test_streaming_evaluation_equals_the_whole_canvas(model64, iccad13):
    layout = two_clips(iccad13)
    for fill in ("lithobench",):
        whole = evaluate(model64, layout, fill=fill, tile=True)
        streamed = evaluate_streaming(model64, layout, fill=fill)
        assert len(streamed.tiles) == len(whole.tiles) == 6
        assert (streamed.l2, streamed.pvb, streamed.epe, streamed.epe_samples) == \
            (whole.l2, whole.pvb, whole.epe, whole.epe_samples)
        assert streamed.topology_defects == whole.topology_defects > 0
        assert sorted_records(streamed) == sorted_records(whole)  # every EPE and topology record
        assert sorted(streamed.epe_nm.tolist()) == sorted(whole.epe_nm.tolist())
        assert sum(t.l2 for t in streamed.per_tile) == whole.l2


def test_streaming_api_matches_and_refuses_what_it_cannot_do(iccad13, tmp_path, litho_env):
    lay = str(write_oas(two_clips(iccad13), tmp_path / "two.oas"))
    whole = api.evaluate({"layout": lay, "streaming": False})
    streamed = api.evaluate({"layout": lay, "streaming": True})
    assert streamed["metrics"] == whole["metrics"]
    with pytest.raises(BadRequest) as exc:
        api.evaluate({"layout": lay, "streaming": True, "tile": "never"})
    assert exc.value.code == "LITHO_STREAMING_UNSUPPORTED"


def test_tile_store_keeps_finished_cores_and_refuses_another_plan(tmp_path):
    store = tiled.TileStore(tmp_path / "tiles", {"plan": "a"})
    core = (np.arange(64 * 64).reshape(64, 64) % 3 == 0).astype(np.uint8)
    store.save("raw", "T_0_0", core, {"wave": 0})
    assert np.array_equal(store.load("raw", "T_0_0"), core)
    again = tiled.TileStore(tmp_path / "tiles", {"plan": "a"})
    assert again.info("raw", "T_0_0")["wave"] == 0 and again.info("raw", "T_0_1") is None
    # a torn write (file changed after its record) is not a finished tile
    (tmp_path / "tiles" / "raw" / "T_0_0.npy").write_bytes(b"torn")
    assert again.info("raw", "T_0_0") is None
    with pytest.raises(BadRequest) as exc:
        tiled.TileStore(tmp_path / "tiles", {"plan": "b"})
    assert exc.value.code == "LITHO_TILE_PLAN_MISMATCH" and exc.value.details["differs"] == ["plan"]



@pytest.mark.slow
@pytest.mark.timeout(900)
def test_tiled_optimize_waves_resume_stitch_and_seams(iccad13, tmp_path, litho_env):
    lay = str(write_oas(small_block(iccad13), tmp_path / "block.oas"))
    out = tmp_path / "mask.oas"
    req = {"layout": lay, "out": str(out), "iterations": 6, "threads": 1, "tiling": {"dir": str(tmp_path / "tiles")},
           "mrc": {"min_feature_nm": 9, "min_area_nm2": 400}}
    # a worker that dies mid-run (here: cancelled inside its second tile) leaves its finished tiles
    token = CountingToken(cancel_after=20)
    with pytest.raises(Cancelled):
        api.optimize(req, token)
    finished = sorted(p.stem for p in (tmp_path / "tiles" / "raw").glob("*.json"))
    assert finished == ["T_0_0"]  # wave 0 first
    # a batch of tiles without stitching: what one tile task of a work queue does
    part = api.optimize({**req, "tiling": {**req["tiling"], "tiles": ["T_0_0", "T_0_1"]}})
    assert part["tiling"]["tiles_resumed"] == ["T_0_0"] and part["tiling"]["tiles_run"] == ["T_0_1"]
    assert part["tiling"]["stitched"] is False and part["tiling"]["missing"] == ["T_1_0", "T_1_1"]
    assert not out.exists()
    full = api.optimize(req)
    t = full["tiling"]
    assert t["tiles_resumed"] == ["T_0_0", "T_0_1"] and t["tiles_run"] == ["T_1_0", "T_1_1"]
    assert t["stitched"] and t["plan"]["tiles"] == 4 and t["plan"]["halo_px"] == 512
    assert t["seam_check"]["passed"] and t["seam_check"]["windows"] == 1
    assert t["seam_check"]["mask_mismatch_px"] == 0  # no feature cut or changed at a seam
    assert full["metrics"]["l2_nm2"] < full["baseline_metrics"]["l2_nm2"]
    assert out.is_file() and full["mask"]["polygons"] > 0
    # the standard provenance block rides inside the tiled result too, beside the engine's keys
    for res in (part, full):
        assert {"seed", "engine_versions", "inputs_hash", "outputs_hash", "revision_id"} <= set(res["provenance"])
    assert full["provenance"]["streamed"] is True and full["provenance"]["seed"] == 0
    # the written mask, evaluated from its geometry, gives the reported metrics
    again = api.evaluate({"layout": lay, "mask": str(out), "tile": "always", "halo_nm": 512})
    assert again["metrics"]["l2_nm2"] == full["metrics"]["l2_nm2"]
    assert again["metrics"]["pvb_nm2"] == full["metrics"]["pvb_nm2"]
    # a request with other ILT settings may not reuse the folder
    with pytest.raises(BadRequest) as exc:
        api.optimize({**req, "iterations": 7})
    assert exc.value.code == "LITHO_TILE_PLAN_MISMATCH"
    plan_pin = json.loads((tmp_path / "tiles" / "plan.json").read_text())
    assert plan_pin["tiles"] == 4


def test_tile_queue_batches_waves_and_depends_on_earlier_neighbours(model32, iccad13):
    from worker_sdk.litho.tilequeue import tile_queue

    layout = Layout(tuple(p for k in range(4) for p in load_layout(glp(4, iccad13)).translated(k * 1100, k * 1100).polygons),
                    "four copies", "M1")
    plan = tiled.plan_layout(layout, model32, "lithobench")
    q = tile_queue(plan, layout="l.oas", out="m.oas", tile_dir="m.tiles", kernels="k", name="t", batch_size=3,
                   iterations=5, mrc={"min_feature_nm": 9})
    tasks = {t["node_id"]: t for t in q["tasks"]}
    tile_tasks = [t for t in q["tasks"] if t["node_id"].startswith("tiles-")]
    owner = {tid: t["node_id"] for t in tile_tasks for tid in t["action_spec"]["params"]["tiling"]["tiles"]}
    assert sorted(owner) == sorted(t.tile_id for t in plan.tiles)  # every tile in exactly one batch
    for t in tile_tasks:
        params = t["action_spec"]["params"]
        assert params["tiling"]["stitch"] is False and params["seed"] == 0 and len(params["tiling"]["tiles"]) <= 3
        assert set(params["tiling"].get("clean", [])) <= set(params["tiling"]["tiles"])
        waves = {plan.wave_of(plan.tile(tid)) for tid in params["tiling"]["tiles"]}
        assert len(waves) == 1  # a batch never mixes waves
        wave = waves.pop()
        need = {owner[u.tile_id] for tid in params["tiling"]["tiles"] for u in plan.neighbours(plan.tile(tid))
                if plan.wave_of(u) < wave}
        assert set(t["dependencies"]) == need  # exactly the batches holding earlier-wave neighbours
    clean_tasks = [t for t in q["tasks"] if t["node_id"].startswith(("clean-", "seams-"))]
    assert set(tasks["stitch"]["dependencies"]) == {t["node_id"] for t in tile_tasks + clean_tasks}
    assert tasks["stitch"]["action_spec"]["params"]["tiling"] == {"dir": "m.tiles", "stitch": True}
    assert tasks["evaluate"]["dependencies"] == ["stitch"]
    assert [v["suite"] for v in q["validations"]] == ["litho.resim"]


def test_a_wave_of_tiles_optimised_as_one_batch_equals_one_at_a_time(model32, iccad13, tmp_path):
    from worker_sdk.litho.ilt import ILTConfig
    from worker_sdk.litho.process import DEFAULT
    from worker_sdk.litho.streaming import PolygonIndex

    layout = two_clips(iccad13)
    plan = tiled.plan_layout(layout, model32, "lithobench")
    wave0 = [t.tile_id for t in plan.waves()[0] if t.row == 0]
    assert len(wave0) == 2  # T_0_0 and T_0_2: one wave, not neighbours
    cfg = ILTConfig().scaled(4)
    index = PolygonIndex(layout)
    cores = {}
    for batch in (1, 2):
        store = tiled.TileStore(tmp_path / f"b{batch}", tiled.store_pin(plan, layout, cfg, None, DEFAULT))
        done = tiled.optimize_tiles(model32, plan, store, index, cfg, corners=DEFAULT.corners, only=wave0, batch=batch)
        assert sorted(r["tile_id"] for r in done) == wave0 and not any(r["resumed"] for r in done)
        assert {r["batch"] for r in done} == {batch}
        cores[batch] = {tid: store.info("raw", tid)["digest"] for tid in wave0}
    assert cores[1] == cores[2]  # the same bytes, float32 included
