"""EPE sampling rule, EPE checks, and per-location records of the metrics."""
from __future__ import annotations

import numpy as np

from worker_sdk.litho.layout import parse_glp, rasterize
from worker_sdk.litho.metrics import _positions, components, edge_samples, epe_check


def test_sampling_rule_every_40nm_from_40nm_in():
    assert _positions(0, 80) == [40.0]  # <= 80 nm: once, at the centre
    assert _positions(0, 50) == [25.0]
    assert _positions(0, 81) == [40.0]
    assert _positions(0, 200) == [40.0, 80.0, 120.0, 160.0]
    assert _positions(100, 300) == [140.0, 180.0, 220.0, 260.0]


def test_epe_samples_of_a_rectangle_and_perfect_print():
    layout = parse_glp("RECT N M1 100 100 200 60")
    for fill in ("exact", "lithobench"):
        target = rasterize(layout, fill, size=512, shift=(0, 0))
        samples = edge_samples(layout, (0, 0), fill, 512)
        # two 200 nm edges with 4 samples each, two 60 nm edges with 1 each
        assert len(samples) == 10
        for s in samples:
            assert target[s.inside_px] and not target[s.outside_px]
        assert epe_check(samples, target.astype(bool)) == []


def test_epe_flags_pullback_and_overshoot():
    layout = parse_glp("RECT N M1 100 100 200 100")
    target = rasterize(layout, "exact", size=512, shift=(0, 0)).astype(bool)
    samples = edge_samples(layout, (0, 0), "exact", 512)
    shrunk = np.zeros_like(target)
    shrunk[100:200, 100:285] = True  # right edge pulled back 15 nm: the 15th pixel inside is lost
    bad = epe_check(samples, shrunk)
    assert {(v["x"], v["kind"]) for v in bad} == {(300.0, "inner")}
    ok = np.zeros_like(target)
    ok[100:200, 100:286] = True  # 14 nm pullback is within the constraint
    assert epe_check(samples, ok) == []
    grown = np.zeros_like(target)
    grown[100:200, 100:315] = True  # 15 nm overshoot reaches the 15th pixel outside
    assert {v["kind"] for v in epe_check(samples, grown)} == {"outer"}


def test_components_give_area_and_location():
    img = np.zeros((64, 64), dtype=bool)
    img[10:20, 10:15] = True
    img[40:42, 50:60] = True
    comps = components(img)
    assert [(c["area"], c["bbox"]) for c in comps] == [(50, [10, 10, 15, 20]), (20, [50, 40, 60, 42])]
    assert components(np.zeros((8, 8), dtype=bool)) == []
