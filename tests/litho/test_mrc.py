"""Mask-rule cleanup: slivers and pinholes go, stray material goes, shapes stay."""
from __future__ import annotations

import klayout.db as kdb
import torch
from hypothesis import given, settings, strategies as st

from worker_sdk.litho.mrc import MaskRules, clean_mask, rule_violations


def _region(mask: torch.Tensor) -> kdb.Region:
    reg = kdb.Region()
    h = mask.shape[0]
    for y in range(h):
        row = mask[y]
        x = 0
        while x < row.numel():
            if row[x] > 0.5:
                x0 = x
                while x < row.numel() and row[x] > 0.5:
                    x += 1
                reg.insert(kdb.Box(x0, h - y - 1, x, h - y))
            x += 1
    return reg.merged()


def test_slivers_pinholes_and_far_material_are_removed() -> None:
    t = torch.zeros(128, 128)
    t[40:80, 40:80] = 1
    m = t.clone()
    m[60, 10:120] = 1          # a 1-px sliver through the shape and beyond
    m[55:57, 55:57] = 0        # a pinhole
    m[0:3, 0:3] = 1            # stray material at the canvas corner
    out = clean_mask(m, t, MaskRules(min_feature_px=5, halo_px=16))
    assert out[58:62, 100:120].sum() == 0 and out[0:3, 0:3].sum() == 0
    assert out[55:57, 55:57].min() == 1
    assert torch.equal(out[40:80, 40:80], t[40:80, 40:80])


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(8, 50), st.integers(8, 50), st.integers(1, 14), st.integers(1, 14)),
                min_size=1, max_size=6))
def test_cleaned_masks_pass_projection_width_and_space_checks(boxes) -> None:
    # opening leaves a union of squares (widths >= the element); gaps it leaves
    # at offset junctions are bridged
    m = torch.zeros(64, 64)
    for x, y, w, h in boxes:
        m[y:y + h, x:x + w] = 1
    out = clean_mask(m, m, MaskRules(min_feature_px=5, halo_px=64))
    reg = _region(out)
    proj = kdb.Metrics.Projection
    assert reg.width_check(4, False, proj).count() == 0
    assert reg.space_check(4, False, proj).count() == 0


def test_rules_reject_even_elements() -> None:
    try:
        MaskRules(min_feature_px=8)
    except ValueError:
        pass
    else:
        raise AssertionError("even element accepted")


def test_small_islands_go_and_small_holes_fill() -> None:
    t = torch.zeros(96, 96)
    t[20:70, 20:70] = 1
    m = t.clone()
    m[40:44, 40:44] = 0          # a 16 px hole: filled
    m[30:45, 55:65] = 0          # a 150 px hole: kept
    m[80:83, 80:83] = 1          # a 9 px island: removed
    m[2:14, 2:14] = 1            # a 144 px island: kept
    out = clean_mask(m, t, MaskRules(min_feature_px=1, halo_px=96, min_area_px=100))
    assert out[40:44, 40:44].min() == 1 and out[30:45, 55:65].max() == 0
    assert out[80:83, 80:83].max() == 0 and out[2:14, 2:14].min() == 1
    assert int(out.sum()) == int(t.sum()) - 150 + 144


def test_a_gap_left_at_an_offset_junction_is_bridged() -> None:
    m = torch.zeros(64, 64)
    m[8:13, 8:13] = 1
    m[14:19, 9:14] = 1  # one empty row between two offset squares
    out = clean_mask(m, m, MaskRules(min_feature_px=5, halo_px=64))
    assert out[13, 9:13].min() == 1
    reg = _region(out)
    assert reg.count() == 1 and reg.space_check(4, False, kdb.Metrics.Projection).count() == 0


def test_bridging_never_leaves_a_sliver() -> None:
    # two squares whose facing edges overlap by 2 px: a plain gap fill would be a 2 px sliver
    m = torch.zeros(64, 64)
    m[10:19, 10:19] = 1
    m[20:29, 17:26] = 1
    out = clean_mask(m, m, MaskRules(min_feature_px=9, halo_px=64))
    reg = _region(out)
    proj = kdb.Metrics.Projection
    assert reg.width_check(8, False, proj).count() == 0
    assert reg.space_check(8, False, proj).count() == 0


def test_material_cut_by_the_canvas_edge_leaves_no_sliver() -> None:
    # the morphology sees material beyond the canvas edge: a 6 px strip along the edge survived
    # the opening and was a width violation once nothing was cleared inside the canvas
    t = torch.zeros(96, 96)
    t[40:60, 40:60] = 1
    m = t.clone()
    m[10:80, 0:6] = 1
    out = clean_mask(m, t, MaskRules(min_feature_px=9, halo_px=2048, min_space_px=9))
    assert out[:, :9].sum() == 0
    assert _region(out).width_check(9, False, kdb.Metrics.Projection).count() == 0
    assert torch.equal(out[40:60, 40:60], t[40:60, 40:60])


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60), st.integers(1, 30), st.integers(1, 30)),
                min_size=1, max_size=8))
def test_masks_cleaned_without_a_halo_pass_9_nm_width_and_space_checks(boxes) -> None:
    # anywhere on the canvas, edges included: the frame is cleared and every gap below 9 repaired
    m = torch.zeros(72, 72)
    for x, y, w, h in boxes:
        m[y:y + h, x:x + w] = 1
    out = clean_mask(m, m, MaskRules(min_feature_px=9, halo_px=2048, min_space_px=9))
    reg = _region(out)
    proj = kdb.Metrics.Projection
    assert reg.width_check(9, False, proj).count() == 0
    assert reg.space_check(9, False, proj).count() == 0
    assert _euclidean_markers(out) == (0, 0, 0)  # corner to corner too, touches included
    assert out[:9].sum() == 0 and out[-9:].sum() == 0 and out[:, :9].sum() == 0 and out[:, -9:].sum() == 0


def _euclidean_markers(out: torch.Tensor, space: int = 9) -> tuple[int, int, int]:
    reg = _region(out)
    eucl = kdb.Metrics.Euclidian
    return (reg.width_check(space, False, eucl).count(), reg.space_check(space, False, eucl).count(),
            reg.width_check(1, False, eucl).count())


def test_cleanup_removes_a_corner_to_corner_touch() -> None:
    # two squares meeting at one corner: no projection marker, a zero-width neck to a mask shop
    m = torch.zeros(96, 96)
    m[20:40, 20:40] = 1
    m[40:60, 40:60] = 1
    assert _euclidean_markers(m)[2] >= 1
    out = clean_mask(m, m, MaskRules(min_feature_px=9, halo_px=2048, min_space_px=9))
    assert _euclidean_markers(out) == (0, 0, 0)
    assert rule_violations(out.numpy(), MaskRules(min_feature_px=9, min_space_px=9)) == {
        "width": 0, "space": 0, "width_euclidean": 0, "space_euclidean": 0, "corner_touch": 0, "area": 0}


def test_cleanup_opens_a_diagonal_space_that_projection_misses() -> None:
    # corners 5 px apart in x and in y: 7.1 nm corner to corner, no facing edges
    m = torch.zeros(96, 96)
    m[20:40, 20:40] = 1
    m[45:65, 45:65] = 1
    reg = _region(m)
    assert reg.space_check(9, False, kdb.Metrics.Projection).count() == 0
    assert _euclidean_markers(m)[1] >= 1
    out = clean_mask(m, m, MaskRules(min_feature_px=9, halo_px=2048, min_space_px=9))
    assert _euclidean_markers(out) == (0, 0, 0)
    assert int(out.sum()) > 0.9 * int(m.sum())  # a corner cut, not a shape removed
