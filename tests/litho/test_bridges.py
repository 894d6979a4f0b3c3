"""The ILT's bridge term: where it acts, and that it keeps clip 3's mask free of bridges."""
from __future__ import annotations

import numpy as np
import pytest

from worker_sdk.litho import api
from worker_sdk.litho.ilt import bridge_gaps

from .conftest import glp


def test_bridge_gaps_mark_only_narrow_gaps_between_two_shapes():
    t = np.zeros((256, 256), dtype=np.uint8)
    t[50:150, 40:100] = 1
    t[50:150, 160:200] = 1  # 60 px from the first shape
    t[200:240, 20:60] = 1  # a third shape 50 px below the first
    g = bridge_gaps(t, 40)
    assert g[100, 130] == 1  # between the two facing shapes
    assert g[100, 20] == 0 and g[100, 220] == 0  # beside one shape only
    assert not (g * t).any()  # never on the target
    assert g[175, 50] == 1  # between the first and the third shape
    far = bridge_gaps(t, 20)
    assert far[100, 130] == 0  # a 60 px gap is wider than twice 20 px


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_bridge_term_keeps_clip_3_free_of_bridges_with_mask_rules(iccad13, litho_env, tmp_path):
    # without the term, this mask prints one bridge at nominal and two at max dose
    # (docs/benchmarks-history.md, "ILT bridge term")
    r = api.optimize({"layout": str(glp(3, iccad13)), "out": str(tmp_path / "m3.png"), "threads": 1,
                      "mrc": {"min_feature_nm": 9, "min_area_nm2": 400}, "bridge_weight": 4.0})
    topo = r["metrics"]["topology"]
    assert all(topo[c]["bridge"] == 0 for c in ("nominal", "max", "min")), topo
    assert r["ilt"]["bridge_weight"] == 4.0
    assert r["metrics"]["l2_nm2"] < 80_000
