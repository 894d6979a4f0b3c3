"""Tiles with halos, stitched in the canvas frame; per-tile cancellation."""
from __future__ import annotations

import pytest

from worker_sdk.cancel import Cancelled
from worker_sdk.litho import api
from worker_sdk.litho.engine import evaluate
from worker_sdk.litho.layout import Layout, load_layout

from .conftest import glp
from tests.litho.conftest import CountingToken


def test_tiled_equals_single_clip_and_group_ids_survive_repartitioning(model64, iccad13):
    layout = str(glp(1, iccad13))
    one = api.evaluate({"layout": layout, "report_level": "detailed", "tile": "never"})
    four = api.evaluate({"layout": layout, "report_level": "detailed", "tile": "always"})
    assert four["provenance"]["tiles"] == 4 and one["provenance"]["tiles"] == 1
    keys = ("l2_nm2", "pvb_nm2", "epe_violations", "epe_samples", "topology", "topology_defects")
    assert {k: four["metrics"][k] for k in keys} == {k: one["metrics"][k] for k in keys}
    assert one["metrics"]["topology_defects"] > 0  # test 1 without OPC: a bridge at nominal and max
    canon = lambda r: sorted(v["violation_group_id"] for v in r["violations"] if v["dedup_strategy"] == "canonical")
    assert canon(four) == canon(one)  # the same groups, whichever way tiles cut them
    assert len(four["violations"]) > len(one["violations"])  # cut regions add shadows
    assert {v["context"]["tile_id"] for v in four["violations"]} == {"T_0_0", "T_0_1", "T_1_0", "T_1_1"}



def test_layout_larger_than_a_clip_is_tiled_and_cancellable(model64, iccad13):
    base = load_layout(glp(4, iccad13))
    twin = base.translated(2600, 300)
    big = Layout(base.polygons + twin.polygons, "two copies of test 4", "M1")
    single = evaluate(model64, base, fill="exact")
    ev = evaluate(model64, big, fill="exact")
    assert len(ev.tiles) >= 6
    # two copies 2.6 um apart: each prints as it does alone (the optical interaction at that distance is nil)
    assert ev.l2 == 2 * single.l2 and ev.pvb == 2 * single.pvb and ev.epe == 2 * single.epe
    token = CountingToken(cancel_after=3)
    with pytest.raises(Cancelled):
        evaluate(model64, big, fill="exact", token=token)
    assert token.checks == 4  # stopped at the first check after the cut-off: per tile / per corner
