"""EPE identical to LithoBench's checker, connected components, topology, and per-location records.

`_reference_epe` is a deliberately plain, loop-by-loop restatement of the
LithoBench EPE rule (boundary pixels, vertical/horizontal edge pixels, runs
in scan order, samples every 40 nm from both ends, probes 15 px from the edge
pixel); the engine's vectorised `epe_samples` must agree with it sample for
sample, and the counts of the shipped clips are pinned.
"""
from __future__ import annotations

import numpy as np
import pytest

from worker_sdk.litho.layout import load_layout, parse_glp, placement, rasterize
from worker_sdk.litho.metrics import (components, epe_check, epe_samples, label, label_components, pv_band,
                                      topology, topology_counts)

from .conftest import glp, two_lines_with_masks


def _reference_epe(target: np.ndarray, printed: np.ndarray) -> tuple[list[tuple[int, int]], int, int]:
    """(sample pixels, inner failures, outer failures) by the LithoBench rule, written out by hand."""
    h, w = target.shape

    def t(r: int, c: int) -> bool:
        return 0 <= r < h and 0 <= c < w and bool(target[r, c])

    edge = set()
    for r, c in zip(*np.nonzero(target)):
        r, c = int(r), int(c)
        if not all(t(r + dr, c + dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1)):
            edge.add((r, c))
    vert = sorted(((c, r) for r, c in edge if not ((r, c - 1) in edge and (r, c + 1) in edge)))  # by column, then row
    horiz = sorted(((r, c) for r, c in edge if not ((r - 1, c) in edge and (r + 1, c) in edge)))  # by row, then column

    def runs(seq):  # consecutive in the second key (the coordinate along the edge)
        out, cur = [], [seq[0]]
        for prev, nxt in zip(seq, seq[1:]):
            if nxt[1] == prev[1] + 1:
                cur.append(nxt)
            else:
                out.append(cur)
                cur = [nxt]
        out.append(cur)
        return out

    samples, inner, outer = [], 0, 0

    def probe(pts, side_in, side_out):
        nonlocal inner, outer
        for p in pts:
            samples.append(p)
            ri, ci = side_in(p)
            ro, co = side_out(p)
            if not printed[ri, ci]:
                inner += 1
            if printed[ro, co]:
                outer += 1

    for run in runs(vert):
        (c0, r0), (c1, r1) = run[0], run[-1]
        cr, cc = (r0 + r1) // 2, (c0 + c1) // 2
        if r1 - r0 <= 80:
            pts = [(cr, cc)]
        else:
            rows = set()
            k = r0 + 40
            while k <= cr:
                rows.add(k)
                k += 40
            k = r1 - 40
            while k > cr:
                rows.add(k)
                k -= 40
            pts = [(r, c0) for r in sorted(rows)]
        r, c = pts[0]
        if t(r, c + 1) and not t(r, c - 1):  # shape on the right: inside is +x
            probe(pts, lambda p: (p[0], p[1] + 15), lambda p: (p[0], p[1] - 15))
        elif t(r, c - 1) and not t(r, c + 1):
            probe(pts, lambda p: (p[0], p[1] - 15), lambda p: (p[0], p[1] + 15))
    for run in runs(horiz):
        (r0, c0), (r1, c1) = run[0], run[-1]
        cr, cc = (r0 + r1) // 2, (c0 + c1) // 2
        if c1 - c0 <= 80:
            pts = [(cr, cc)]
        else:
            cols = set()
            k = c0 + 40
            while k <= cc:
                cols.add(k)
                k += 40
            k = c1 - 40
            while k > cc:
                cols.add(k)
                k -= 40
            pts = [(r0, c) for c in sorted(cols)]
        r, c = pts[0]
        if t(r + 1, c) and not t(r - 1, c):
            probe(pts, lambda p: (p[0] + 15, p[1]), lambda p: (p[0] - 15, p[1]))
        elif t(r - 1, c) and not t(r + 1, c):
            probe(pts, lambda p: (p[0] - 15, p[1]), lambda p: (p[0] + 15, p[1]))
    return samples, inner, outer


def _engine_epe(target, printed):
    samples = epe_samples(target)
    recs = epe_check(samples, printed)
    return (sorted((int(s.y), int(s.x)) for s in samples), sum(r["kind"] == "inner" for r in recs),
            sum(r["kind"] == "outer" for r in recs))


def test_epe_sampling_of_a_rectangle_follows_the_lithobench_rule():
    target = np.zeros((400, 400), dtype=np.uint8)
    target[100:301, 100:161] = 1  # 201 rows x 61 columns, as an inclusive fill of 100..300 x 100..160 draws it
    samples = epe_samples(target)
    # vertical edges run rows 100..300 (200 long): rows 140, 180 from the start (up to the centre 200), 260, 220
    # from the end; horizontal edges are 60 long: once at the centre column 130
    left = sorted((int(s.y), int(s.x)) for s in samples if s.normal == (-1, 0))
    assert left == [(140, 100), (180, 100), (220, 100), (260, 100)]
    top = [(int(s.y), int(s.x)) for s in samples if s.normal == (0, 1)]
    assert top == [(300, 130)]
    assert len(samples) == 10
    s = next(s for s in samples if s.normal == (1, 0))
    assert s.inside_px == (s.inside_px[0], 160 - 15) and s.outside_px == (s.outside_px[0], 160 + 15)
    assert epe_check(samples, target.astype(bool)) == []


def test_epe_inner_probe_is_the_16th_pixel_inside_and_counts_inner_plus_outer():
    target = np.zeros((400, 400), dtype=np.uint8)
    target[100:301, 100:161] = 1
    samples = [s for s in epe_samples(target) if s.normal == (1, 0)]  # right edge, edge pixel column 160
    ok = np.zeros((400, 400), dtype=bool)
    ok[100:301, 100:146] = True  # printed up to column 145 = the 16th pixel inside (160 is the 1st)
    assert epe_check(samples, ok) == []
    short = np.zeros((400, 400), dtype=bool)
    short[100:301, 100:145] = True  # the 16th pixel inside is lost
    assert {r["kind"] for r in epe_check(samples, short)} == {"inner"} and len(epe_check(samples, short)) == 4
    both = short.copy()
    both[100:301, 175] = True  # and something prints at the 15th pixel outside: each sample fails twice
    assert len(epe_check(samples, both)) == 8
    samples_ref, inner, outer = _reference_epe(target, both)
    eng_samples, e_inner, e_outer = _engine_epe(target, both)
    assert sorted(samples_ref) == eng_samples and (inner, outer) == (e_inner, e_outer)


@pytest.mark.parametrize("case,samples,epe", [(1, 140, 86), (4, 64, 64)])
def test_epe_on_no_opc_masks_equals_the_lithobench_rule(iccad13, model64, case, samples, epe):
    from worker_sdk.litho.engine import evaluate

    layout = load_layout(glp(case, iccad13))
    ev = evaluate(model64, layout, fill="lithobench")  # mask = target
    nominal = ev.printed["nominal"]
    ref_samples, inner, outer = _reference_epe(ev.target, nominal)
    eng_samples, e_inner, e_outer = _engine_epe(ev.target, nominal)
    assert eng_samples == sorted(ref_samples)
    assert (e_inner, e_outer) == (inner, outer)
    assert (ev.epe_samples, ev.epe) == (len(ref_samples), inner + outer) == (samples, epe)


NO_OPC = {1: (140, 86), 2: (116, 84), 3: (147, 125), 4: (64, 64), 5: (169, 71),
          6: (161, 66), 7: (134, 71), 8: (66, 37), 9: (189, 66), 10: (64, 26)}


@pytest.mark.slow
def test_epe_counts_of_all_shipped_clips_without_opc(iccad13, model64):
    from worker_sdk.litho.engine import ClipInput, evaluate_batch

    cases = sorted(NO_OPC)
    evs = evaluate_batch(model64, [ClipInput(load_layout(glp(n, iccad13))) for n in cases], memory_bytes=1 << 30)
    for n, ev in zip(cases, evs):
        ref_samples, inner, outer = _reference_epe(ev.target, ev.printed["nominal"])
        assert (len(ref_samples), inner + outer) == NO_OPC[n] == (ev.epe_samples, ev.epe), n


def test_label_is_4_connected_and_matches_a_flood_fill():
    rng = np.random.default_rng(7)
    img = rng.random((60, 70)) < 0.45
    labels, n = label(img)
    # plain flood fill as the reference
    ref = np.zeros(img.shape, dtype=int)
    k = 0
    for r0, c0 in zip(*np.nonzero(img)):
        if ref[r0, c0]:
            continue
        k += 1
        stack = [(r0, c0)]
        ref[r0, c0] = k
        while stack:
            r, c = stack.pop()
            for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                rr, cc = r + dr, c + dc
                if 0 <= rr < img.shape[0] and 0 <= cc < img.shape[1] and img[rr, cc] and not ref[rr, cc]:
                    ref[rr, cc] = k
                    stack.append((rr, cc))
    assert n == k
    assert ((labels > 0) == img).all()
    pairs = set(zip(labels[img].tolist(), ref[img].tolist()))
    assert len(pairs) == k  # a bijection between the two labellings
    comps = label_components(img)
    for k in range(1, n + 1):  # boxes and areas taken from the runs agree with the pixels
        ys, xs = np.nonzero(labels == k)
        assert comps.bbox[k].tolist() == [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
        assert comps.area[k] == len(ys)
    diag = np.array([[1, 0], [0, 1]], dtype=bool)
    assert label(diag)[1] == 2  # corner contact does not connect
    assert label(np.zeros((5, 5), dtype=bool))[1] == 0


def _bars() -> np.ndarray:
    t = np.zeros((120, 160), dtype=np.uint8)
    t[20:100, 20:50] = 1  # shape A
    t[20:100, 70:100] = 1  # shape B, a 20 px gap to A
    t[20:100, 120:140] = 1  # shape C
    return t


def test_topology_finds_bridge_open_extra_and_missing():
    t = _bars()
    assert topology(t, t.astype(bool)) == []
    p = t.astype(bool).copy()
    p[50:60, 50:70] = True  # A and B joined
    p[55:60, 120:140] = False  # C cut in two
    p[5:10, 5:10] = True  # a stray print
    recs = topology(t, p)
    assert topology_counts(recs) == {"bridge": 1, "open": 1, "extra": 1, "missing": 0}
    bridge = next(r for r in recs if r["kind"] == "bridge")
    assert bridge["bbox"] == [20, 20, 100, 100] and len(bridge["target_components"]) == 2
    opened = next(r for r in recs if r["kind"] == "open")
    assert opened["bbox"] == [120, 20, 140, 100] and len(opened["print_components"]) == 2
    gone = t.astype(bool).copy()
    gone[:, 110:150] = False
    assert topology_counts(topology(t, gone)) == {"bridge": 0, "open": 0, "extra": 0, "missing": 1}


def test_a_bridging_mask_is_reported_as_topology_violations_per_corner(iccad13, litho_env, tmp_path):
    from registry.schema_store import validate

    from worker_sdk.litho import api

    two_lines_with_masks(tmp_path)
    lay, png = tmp_path / "two_lines.glp", tmp_path / "bridged.png"
    clean = api.evaluate({"layout": str(lay), "report_level": "detailed", "threads": 1})
    assert clean["metrics"]["topology_defects"] == 0
    assert not any(v["rule_id"].startswith("LITHO.TOPO.") for v in clean["violations"])
    resp = api.evaluate({"layout": str(lay), "mask": str(png), "report_level": "detailed", "threads": 1})
    topo = resp["metrics"]["topology"]
    assert all(topo[c] == {"bridge": 1, "open": 0, "extra": 0, "missing": 0} for c in ("nominal", "max", "min"))
    bridges = [v for v in resp["violations"] if v["rule_id"] == "LITHO.TOPO.BRIDGE"]
    assert sorted(v["context"]["corner"] for v in bridges) == ["max", "min", "nominal"]
    assert all(v["context"]["target_shapes"] == 2 for v in bridges)
    assert sum(v["dedup_strategy"] == "canonical" for v in bridges) == 1  # one place, one group
    for v in bridges:
        validate("litho/violation", v)
    assert resp["rule_deck"]["rules"]["LITHO.TOPO.BRIDGE"]["severity"] == "error"


def test_pv_band_of_two_corners_is_their_xor():
    rng = np.random.default_rng(3)
    a, b, c = (rng.random((30, 30)) < 0.5 for _ in range(3))
    assert (pv_band({"max": a, "min": b}, ("max", "min")) == (a ^ b)).all()
    assert (pv_band({"x": a, "y": b, "z": c}, ("x", "y", "z")) == ((a | b | c) & ~(a & b & c))).all()


def test_components_give_area_and_location():
    img = np.zeros((64, 64), dtype=bool)
    img[10:20, 10:15] = True
    img[40:42, 50:60] = True
    comps = components(img)
    assert [(c["area"], c["bbox"]) for c in comps] == [(50, [10, 10, 15, 20]), (20, [50, 40, 60, 42])]
    assert components(np.zeros((8, 8), dtype=bool)) == []


def test_rasterized_lithobench_target_edges_are_sampled_on_the_filled_pixels():
    layout = parse_glp("RECT N M1 100 100 200 60")
    target = rasterize(layout, "lithobench", size=512, shift=placement(layout, "lithobench", 512))
    for s in epe_samples(target):
        assert target[s.inside_px] and not target[s.outside_px]


def test_measured_epe_is_the_signed_shift_of_the_printed_edge():
    from worker_sdk.litho.metrics import epe_distances

    target = np.zeros((400, 400), dtype=np.uint8)
    target[100:301, 100:161] = 1
    samples = epe_samples(target)
    right = [i for i, s in enumerate(samples) if s.normal == (1, 0)]
    exact = target.astype(bool)
    assert (epe_distances(samples, exact) == 0).all()
    for shift in (-20, -16, -15, -1, 1, 14, 15, 30):
        p = np.zeros_like(exact)
        p[100:301, 100:161 + shift] = True  # the right edge moved by `shift`
        d = epe_distances(samples, p)
        assert set(d[right].tolist()) == {shift}
        # consistent with the checker: the 16th pixel inside fails from 16 nm in, the 15th outside from 15 out
        fails = {(r["x"], r["y"]) for r in epe_check(samples, p) if r["normal"] == [1, 0]}
        assert bool(fails) == (shift <= -16 or shift >= 15)
    far = np.zeros_like(exact)
    assert set(epe_distances(samples, far).tolist()) == {-64}  # nothing printed: capped
