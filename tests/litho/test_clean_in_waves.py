"""The mask clean-up runs in the waves, per tile, and the stitch only assembles.

A tile's clean core reads only its own and its neighbours' raw cores, so the tile queue gives
each tile's clean-up to exactly one task whose checkout holds them: its own batch when every
neighbour is of an earlier wave, else a clean-up task that depends on the batches holding
the tile and its neighbours. The cores cleaned that way, in any order, are byte for byte those
the serial clean-up of the whole block makes; a clean-up short of a neighbour is refused.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from worker_sdk.litho import api, tiled
from worker_sdk.litho.errors import BadRequest
from worker_sdk.litho.ilt import ILTConfig
from worker_sdk.litho.process import DEFAULT
from worker_sdk.litho.streaming import PolygonIndex, window_raster
from worker_sdk.litho.tilequeue import tile_queue

from .test_tile_order import grid
from .test_tiled import two_clips, write_oas

MRC = {"min_feature_nm": 9, "min_area_nm2": 400, "min_space_nm": 9}


def _queue(plan, batch_size: int, clean_in_waves: bool = True) -> dict:
    return tile_queue(plan, layout="l.oas", out="m.oas", tile_dir="m.tiles", kernels="k", name="clean",
                      batch_size=batch_size, iterations=2, clean_in_waves=clean_in_waves)


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 5), cols=st.integers(1, 5), batch_size=st.integers(1, 4))
def test_each_tile_is_cleaned_once_by_a_task_whose_checkout_holds_its_neighbours(rows, cols, batch_size):
    plan = grid(rows, cols)
    q = _queue(plan, batch_size)
    tasks = {t["node_id"]: t for t in q["tasks"]}
    owner = {tid: n for n, t in tasks.items() if n.startswith("tiles-")
             for tid in t["action_spec"]["params"]["tiling"]["tiles"]}
    cleaner: dict[str, list[str]] = {}
    for n, t in tasks.items():
        for tid in t["action_spec"]["params"].get("tiling", {}).get("clean", []):
            cleaner.setdefault(tid, []).append(n)
    assert sorted(cleaner) == sorted(owner) and all(len(v) == 1 for v in cleaner.values())
    for tid, (n,) in cleaner.items():
        t = plan.tile(tid)
        held = {n} | set(tasks[n]["dependencies"])  # what the task's derived base holds (and itself makes)
        assert {owner[u.tile_id] for u in (t, *plan.neighbours(t))} <= held, (tid, n)
        if n.startswith("tiles-"):  # cleaned right after its ILT: every neighbour is of an earlier wave
            assert all(plan.wave_of(u) < plan.wave_of(t) for u in plan.neighbours(t))
        else:
            assert tasks[n]["action_spec"]["params"]["tiling"]["tiles"] == tasks[n]["action_spec"]["params"]["tiling"]["clean"]
    # each seam window is re-simulated once, after the tasks that optimised and cleaned the tiles under it
    seam_of: dict[str, list[str]] = {}
    for n, t in tasks.items():
        for sid in t["action_spec"]["params"].get("tiling", {}).get("seams", []):
            seam_of.setdefault(sid, []).append(n)
    windows = tiled.seam_windows(plan)
    assert sorted(seam_of) == sorted(w.tile_id for w in windows) and all(len(v) == 1 for v in seam_of.values())
    for w in windows:
        (n,) = seam_of[w.tile_id]
        under = [u.tile_id for u in tiled.seam_tiles(plan, w)]
        assert set(under) <= set(tasks[n]["action_spec"]["params"]["tiling"]["tiles"])
        assert {owner[tid] for tid in under} | {cleaner[tid][0] for tid in under} <= set(tasks[n]["dependencies"])
    assert set(tasks["stitch"]["dependencies"]) == {n for n in tasks if n.startswith(("tiles-", "clean-", "seams-"))}
    off = _queue(plan, batch_size, clean_in_waves=False)  # the serial clean-up and seam check, as before
    assert not any("clean" in t["action_spec"]["params"].get("tiling", {}) for t in off["tasks"])
    assert not any(t["node_id"].startswith(("clean-", "seams-")) for t in off["tasks"])


def _raw_store(root: Path, plan, layout, cfg) -> tiled.TileStore:
    """Raw cores that look like an ILT result: each tile's target with speckles the clean-up removes."""
    store = tiled.TileStore(root, tiled.store_pin(plan, layout, cfg, MRC, DEFAULT))
    index = PolygonIndex(layout)
    rng = np.random.default_rng(7)
    for t in plan.tiles:
        tgt = window_raster(index, plan.fill, plan.clip, plan.shift, t)
        ys, xs = tiled._core_slices(t)
        core = tgt[ys, xs].copy()
        core[rng.random(core.shape) < 0.0005] ^= 1
        store.save("raw", t.tile_id, core, {"wave": plan.wave_of(t)})
    return store


def _setup(model32, iccad13):
    """(layout, plan, ILT config, mask rules, polygon index) of the two-clip layout."""
    layout = two_clips(iccad13)
    plan = tiled.plan_layout(layout, model32, "lithobench")
    return layout, plan, ILTConfig.from_request({"iterations": 2, "mrc": MRC}), api._mask_rules(MRC), PolygonIndex(layout)


@pytest.mark.slow
def test_cores_cleaned_in_the_waves_are_the_serial_clean_up_byte_for_byte(model32, iccad13, tmp_path):
    # two tiles (a clean-up is about 5 s a tile here): each cleaned alone by the task the queue
    # gives it, against both cleaned by one call in the other order, the stitch's own path
    layout, plan, cfg, rules, index = _setup(model32, iccad13)
    serial = _raw_store(tmp_path / "serial", plan, layout, cfg)
    waves = _raw_store(tmp_path / "waves", plan, layout, cfg)
    picked = ["T_0_0", "T_1_1"]  # one cleaned by a clean-up task, one by its own (last-wave) batch
    by = {tid: t["node_id"] for t in _queue(plan, 1)["tasks"]
          for tid in t["action_spec"]["params"].get("tiling", {}).get("clean", [])}
    assert by["T_0_0"].startswith("clean-") and by["T_1_1"].startswith("tiles-")
    assert tiled.clean_tiles(plan, waves, index, cfg, rules, ["T_0_0"]) == ["T_0_0"]
    assert tiled.clean_tiles(plan, waves, index, cfg, rules, ["T_1_1"]) == ["T_1_1"]
    assert tiled.clean_tiles(plan, waves, index, cfg, rules, picked) == []  # done once, never again
    assert tiled.clean_tiles(plan, serial, index, cfg, rules, picked[::-1]) == picked[::-1]
    for tid in picked:
        assert waves.raw_bytes("clean", tid) == serial.raw_bytes("clean", tid), tid
        assert serial.raw_bytes("clean", tid) != serial.raw_bytes("raw", tid)  # the clean-up did something


def test_a_clean_up_short_of_a_neighbours_raw_core_is_refused_and_writes_nothing(model32, iccad13, tmp_path):
    layout = two_clips(iccad13)
    plan = tiled.plan_layout(layout, model32, "lithobench")
    cfg = ILTConfig.from_request({"iterations": 2, "mrc": MRC})
    store = _raw_store(tmp_path / "tiles", plan, layout, cfg)
    (tmp_path / "tiles" / "raw" / "T_1_1.npy").unlink()  # a neighbour of T_0_0 not optimised yet
    with pytest.raises(BadRequest) as exc:
        tiled.clean_tiles(plan, store, PolygonIndex(layout), cfg, api._mask_rules(MRC), ["T_0_0"])
    assert exc.value.code == "LITHO_TILES_MISSING" and exc.value.details["tiles"] == ["T_1_1"]
    assert not (tmp_path / "tiles" / "clean").exists()


def _bands(plan, layout) -> tiled.SeamBands:
    """Tiles' own prints for the comparison: here each tile's target (any bits will do)."""
    index = PolygonIndex(layout)
    bands = tiled.SeamBands()
    for t in plan.tiles:
        tgt = window_raster(index, plan.fill, plan.clip, plan.shift, t).astype(bool)
        bands.keep(t, {c.name: tgt for c in DEFAULT.corners})
    return bands


@pytest.mark.slow
def test_seam_records_made_in_the_waves_give_the_serial_seam_check(model32, iccad13, tmp_path):
    layout, plan, cfg, rules, index = _setup(model32, iccad13)
    store = _raw_store(tmp_path / "tiles", plan, layout, cfg)
    for t in plan.tiles:  # clean cores: the raw ones (the check compares whatever is stored)
        store.put_raw("clean", t.tile_id, store.raw_bytes("raw", t.tile_id), store.info("raw", t.tile_id))
    bands = _bands(plan, layout)
    serial = tiled.seam_check(model32, plan, store, index, cfg, rules, window=DEFAULT, bands=bands)
    windows = tiled.seam_windows(plan)
    assert [w.tile_id for w in windows] == ["S_0_0", "S_0_1"] and serial["windows_in_waves"] == 0
    for w in reversed(windows):  # made by separate tasks, in any order, stored in the folder
        tiled.save_seam_record(store, tiled.seam_window(model32, plan, store, index, cfg, rules, w, window=DEFAULT))
    done = tiled.seam_records(store)
    assert sorted(done) == ["S_0_0", "S_0_1"]
    waves = tiled.seam_check(model32, plan, store, index, cfg, rules, window=DEFAULT, bands=bands, done=done)
    assert waves["windows_in_waves"] == 2
    assert {k: v for k, v in waves.items() if k != "windows_in_waves"} == \
        {k: v for k, v in serial.items() if k != "windows_in_waves"}
    # the counts the serial seam check of the tree before seam records (b9e4e3c) gives on this data
    assert {k: v for k, v in serial.items() if k != "windows_in_waves"} == {
        "windows": 2, "band_px": 32, "seam_px": 253952, "print_mismatch_px": 80694, "print_mismatch_thick_px": 75227,
        "mask_mismatch_px": 118, "seam_l2_px": 26080, "passed": False}


def test_a_seam_window_before_its_tiles_are_clean_is_refused(model32, iccad13, tmp_path):
    layout = two_clips(iccad13)
    plan = tiled.plan_layout(layout, model32, "lithobench")
    cfg = ILTConfig.from_request({"iterations": 2, "mrc": MRC})
    store = _raw_store(tmp_path / "tiles", plan, layout, cfg)
    w = tiled.seam_windows(plan)[0]
    with pytest.raises(BadRequest) as exc:
        tiled.seam_window(model32, plan, store, PolygonIndex(layout), cfg, api._mask_rules(MRC), w, window=DEFAULT)
    assert exc.value.code == "LITHO_TILES_MISSING" and exc.value.details["tiles"] == ["T_0_0", "T_0_1", "T_1_0", "T_1_1"]
    assert tiled.seam_records(store) == {}


@pytest.mark.parametrize("key, ids, code, bad", [
    ("clean", ["T_0_0", "T_1_1"], "LITHO_BAD_TILE_PLAN", {"tiles": ["T_1_1"]}),  # a tile the request does not hold
    ("seams", ["S_0_0", "S_1_0"], "LITHO_UNKNOWN_TILE", {"seams": ["S_1_0"]}),  # a seam window the plan lacks
])
def test_a_request_to_clean_or_check_what_it_cannot_is_refused_before_any_ilt(key, ids, code, bad, iccad13, tmp_path,
                                                                              litho_env):
    lay = str(write_oas(two_clips(iccad13), tmp_path / "two.oas"))
    req = {"layout": lay, "out": str(tmp_path / "m.oas"), "iterations": 2, "threads": 1, "mrc": MRC,
           "tiling": {"dir": str(tmp_path / "tiles"), "tiles": ["T_0_0"], key: ids, "stitch": False}}
    with pytest.raises(BadRequest) as exc:
        api.optimize(req)
    assert exc.value.code == code and {k: exc.value.details[k] for k in bad} == bad
    assert not (tmp_path / "tiles" / "raw").exists()
