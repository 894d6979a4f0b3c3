"""The full-layout evaluation is made in the waves, tile by tile, and the end only sums it.

Each tile is evaluated once, by the seam task the queue gives it, on its own window of the clean
mask (and of the target), once it and its eight neighbours are clean; the record names the
digests of the nine cores it read. The stitch and the evaluation task then sum the records
instead of simulating again, wherever the record is still exact (those cores unchanged), and
simulate only the rest. The sums equal the serial evaluation of the whole mask: pixel counts,
EPE, topology, the seam check's strips and the deduplicated violations.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from worker_sdk.litho import api, tiled
from worker_sdk.litho.engine import evaluate as whole_canvas
from worker_sdk.litho.errors import BadRequest
from worker_sdk.litho.layout import load_layout
from worker_sdk.litho.process import DEFAULT
from worker_sdk.litho.streaming import evaluate_streaming, sorted_records
from worker_sdk.litho.tiledjob import WaveEvals
from worker_sdk.litho.tilequeue import evaluated_by
from worker_sdk.litho.violations import dedup, rule_deck, rule_deck_hash

from .test_clean_in_waves import _queue, _raw_store, _setup
from .test_tile_order import grid


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 5), cols=st.integers(1, 5), batch_size=st.integers(1, 4))
def test_each_tile_is_evaluated_once_by_a_task_whose_checkout_holds_its_clean_neighbourhood(rows, cols, batch_size):
    plan = grid(rows, cols)
    tasks = {t["node_id"]: t for t in _queue(plan, batch_size)["tasks"]}
    tiling = {n: t["action_spec"]["params"].get("tiling", {}) for n, t in tasks.items()}
    owner = {tid: n for n, t in tiling.items() if n.startswith("tiles-") for tid in t["tiles"]}
    cleaner = {tid: n for n, t in tiling.items() for tid in t.get("clean", [])}
    judge: dict[str, list[str]] = {}
    for n, t in tiling.items():
        for tid in t.get("evaluate", []):
            judge.setdefault(tid, []).append(n)
    if len(plan.tiles) < 2:  # no seam window, no seam task: the stitch evaluates the one tile
        assert judge == {}
        return
    assert sorted(judge) == sorted(t.tile_id for t in plan.tiles) and all(len(v) == 1 for v in judge.values())
    for tid, (n,) in judge.items():
        assert n.startswith("seams-")
        held = set(tasks[n]["dependencies"])
        near = tiled.eval_cores(plan, plan.tile(tid))
        assert {owner[u] for u in near} | {cleaner[u] for u in near} <= held, (tid, n)
    assert set(evaluated_by(plan).values()) <= {s.tile_id for s in tiled.seam_windows(plan)}
    off = tile_queue_without_evaluation(plan, batch_size)
    assert not any("evaluate" in t["action_spec"]["params"].get("tiling", {}) for t in off["tasks"])


def tile_queue_without_evaluation(plan, batch_size):
    from worker_sdk.litho.tilequeue import tile_queue

    return tile_queue(plan, layout="l.oas", out="m.oas", tile_dir="m.tiles", kernels="k", name="e",
                      batch_size=batch_size, iterations=2, evaluate_in_waves=False)


class NoSimulation:
    """The model's identity without its optics: any simulation through it fails the test."""

    def __init__(self, model) -> None:
        self.size, self.digests, self.dtype, self.device = model.size, model.digests, model.dtype, model.device

    def printed(self, *args, **kwargs):
        raise AssertionError("a tile was simulated again")


def _clean_store(tmp_path: Path, model32, iccad13):
    layout, plan, cfg, rules, index = _setup(model32, iccad13)
    store = _raw_store(tmp_path / "tiles", plan, layout, cfg)
    for t in plan.tiles:  # clean cores: the raw ones (the evaluation takes whatever is stored)
        store.put_raw("clean", t.tile_id, store.raw_bytes("raw", t.tile_id), store.info("raw", t.tile_id))
    return layout, plan, cfg, rules, index, store


def _figures(ev) -> dict:
    return {"l2": ev.l2, "pvb": ev.pvb, "pvb_grid": ev.pvb_grid, "epe": ev.epe, "epe_samples": ev.epe_samples,
            "epe_nm": [int(v) for v in ev.epe_nm], "records": sorted_records(ev), "topology": ev.topology}


def _violations(ev, model) -> list[tuple]:
    deck = rule_deck_hash(rule_deck("lithobench", model.digests, DEFAULT))
    return [(g["record"].rule_id, g["record"].x, g["record"].y, g["record"].bbox, g["record"].tile_id, g["record"].area,
             g["group_id"], g["canonical_location"], g["canonical"]) for g in dedup(api._raw_records(ev), deck)]


def test_the_waves_evaluations_summed_equal_the_serial_evaluation_of_the_whole_mask(model32, iccad13, tmp_path):
    layout, plan, cfg, rules, index, store = _clean_store(tmp_path, model32, iccad13)
    # the serial evaluations after the waves: the stitch's two (mask, target) and the evaluation task's
    bands_serial = tiled.SeamBands()
    after = evaluate_streaming(model32, layout, mask_window=tiled.mask_window(plan, store), halo=plan.halo,
                               on_print=bands_serial.keep)
    before = evaluate_streaming(model32, layout, halo=plan.halo)
    mask_file = tmp_path / "mask.oas"
    tiled.write_mask(plan, store, mask_file)
    mask_layout = load_layout(mask_file)
    detailed = whole_canvas(model32, layout, mask_layout=mask_layout, tile=True, halo=plan.halo)

    # in the waves: each seam task evaluates the tiles the queue gives it, in any order
    per_task = [t["action_spec"]["params"]["tiling"]["evaluate"] for t in _queue(plan, 2)["tasks"]
                if "evaluate" in t["action_spec"]["params"].get("tiling", {})]
    assert sorted(tid for ids in per_task for tid in ids) == sorted(t.tile_id for t in plan.tiles)
    for ids in reversed(per_task):
        assert tiled.evaluate_tiles(model32, plan, store, index, ids, window=DEFAULT) == ids
    assert tiled.evaluate_tiles(model32, plan, store, index, per_task[0], window=DEFAULT) == []  # never twice

    # the end only sums: a model that cannot simulate
    ghost = NoSimulation(model32)
    made = WaveEvals(plan.tiles, store, ghost, DEFAULT)
    bands = tiled.SeamBands()
    f_after = evaluate_streaming(ghost, layout, mask_window=tiled.mask_window(plan, store), halo=plan.halo,
                                 on_print=bands.keep, done=made.part("after"), regions=True)
    f_before = evaluate_streaming(ghost, layout, halo=plan.halo, done=made.part("before"))
    assert made.used == {t.tile_id for t in plan.tiles}
    assert [s.tile_id for s in f_after.per_tile] == [t.tile_id for t in plan.tiles]  # each tile once
    assert all(s.l2 > 0 for s in after.per_tile)  # every tile counts: one dropped would change the sums
    assert _figures(f_after) == _figures(after) and f_after.per_tile == after.per_tile
    assert _figures(f_before) == _figures(before) and f_before.per_tile == before.per_tile
    assert f_after.topology_defects > 0 and f_after.epe > 0  # the joins across cores are exercised
    assert bands.strips == bands_serial.strips  # the seam check compares the same prints
    fused = whole_canvas(ghost, layout, mask_layout=mask_layout, tile=True, halo=plan.halo,
                         prints_of=WaveEvals(plan.tiles, store, ghost, DEFAULT).prints)
    assert api._metrics(fused) == api._metrics(detailed)
    seam_pieces = [v for v in _violations(detailed, model32) if v[0] in ("LITHO.L2.AREA", "LITHO.PVB.AREA")]
    assert len({v[6] for v in seam_pieces}) < len(seam_pieces)  # regions cut by a seam: shadows deduplicated
    assert _violations(fused, model32) == _violations(detailed, model32)
    assert _violations(f_after, model32) == _violations(detailed, model32)  # the records alone, no canvas


def test_a_record_is_used_only_while_the_cores_its_window_read_are_the_masks(model32, iccad13, tmp_path):
    layout, plan, cfg, rules, index, store = _clean_store(tmp_path, model32, iccad13)
    assert tiled.evaluate_tiles(model32, plan, store, index, ["T_0_0", "T_1_2"], window=DEFAULT) == ["T_0_0", "T_1_2"]
    ghost = NoSimulation(model32)
    t00, t12 = plan.tile("T_0_0"), plan.tile("T_1_2")
    assert tiled.fresh_eval(plan.tiles, store, t00, ghost, DEFAULT) is not None
    # a neighbour of T_0_0 changes after its evaluation (say, a later clean-up): T_0_0's record is
    # stale and the stitch simulates it again; T_1_2's window never read that core
    core = store.load("clean", "T_1_0")
    core[0, 0] ^= 1
    store.save("clean", "T_1_0", core, {})
    assert tiled.fresh_eval(plan.tiles, store, t00, ghost, DEFAULT) is None
    assert tiled.fresh_eval(plan.tiles, store, t12, ghost, DEFAULT) is not None
    # another model or process window never reuses a record
    assert tiled.fresh_eval(plan.tiles, store, t12, NoSimulation(type("M", (), {
        "size": model32.size, "digests": {}, "dtype": model32.dtype, "device": model32.device})()), DEFAULT) is None
    made = WaveEvals(plan.tiles, store, ghost, DEFAULT)
    assert made.part("after")(t00) is None and made.part("after")(t12) is not None and made.used == {"T_1_2"}
    with pytest.raises(AssertionError, match="simulated again"):  # the stale tile is simulated, not summed
        evaluate_streaming(ghost, layout, mask_window=tiled.mask_window(plan, store), halo=plan.halo,
                           done=WaveEvals(plan.tiles, store, ghost, DEFAULT).part("after"))


def test_an_evaluation_before_the_neighbourhood_is_clean_is_refused_and_writes_nothing(model32, iccad13, tmp_path):
    layout, plan, cfg, rules, index = _setup(model32, iccad13)
    store = _raw_store(tmp_path / "tiles", plan, layout, cfg)
    for tid in ("T_0_0", "T_0_1", "T_1_0"):  # T_1_1, a neighbour of T_0_0, is not clean yet
        store.put_raw("clean", tid, store.raw_bytes("raw", tid), store.info("raw", tid))
    with pytest.raises(BadRequest) as exc:
        tiled.evaluate_tiles(model32, plan, store, index, ["T_0_0"], window=DEFAULT)
    assert exc.value.code == "LITHO_TILES_MISSING" and exc.value.details["tiles"] == ["T_1_1"]
    assert not (tmp_path / "tiles" / "evals").exists()
    with pytest.raises(BadRequest) as exc:
        tiled.evaluate_tiles(model32, plan, store, index, ["T_9_9"], window=DEFAULT)
    assert exc.value.code == "LITHO_UNKNOWN_TILE"
    assert np.array_equal(store.load("clean", "T_0_0"), store.load("raw", "T_0_0"))
