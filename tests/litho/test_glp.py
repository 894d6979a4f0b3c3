"""The .glp parser and the two fill conventions (hypothesis-driven)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker_sdk.litho.errors import LayoutFormatError
from worker_sdk.litho.layout import parse_glp, rasterize, rasterize_exact

rect = st.tuples(st.integers(0, 200), st.integers(0, 200), st.integers(1, 60), st.integers(1, 60))


def _disjoint(rects):
    """Keep rectangles at least 2 nm apart (the lithobench fill grows right/top by one pixel)."""
    kept = []
    for x, y, w, h in rects:
        if all(x + w + 2 <= a or a + c + 2 <= x or y + h + 2 <= b or b + d + 2 <= y for a, b, c, d in kept):
            kept.append((x, y, w, h))
    return kept


def _glp(rects, noise: list[str]) -> str:
    lines = ["BEGIN", "EQUIV 1 1000 MICRON +X,+Y", "CNAME Top", "LEVEL M1", "CELL Top PRIME"]
    lines += noise
    lines += [f"   RECT N M1 {x} {y} {w} {h}" for x, y, w, h in rects]
    lines += ["ENDMSG"]
    return "\n".join(lines)


@settings(max_examples=60, deadline=None)
@given(st.lists(rect, min_size=1, max_size=8), st.lists(st.sampled_from(["", "# comment", "LEVEL M2", "TEXT foo"]), max_size=3))
def test_rects_parse_and_fill(rects, noise):
    rects = _disjoint(rects)
    layout = parse_glp(_glp(rects, noise))
    assert len(layout.polygons) == len(rects)
    assert layout.area() == sum(w * h for _, _, w, h in rects)
    exact = rasterize(layout, "exact", size=512, shift=(10, 10))
    assert int(exact.sum()) == layout.area()
    lb = rasterize(layout, "lithobench", size=512, shift=(10, 10))
    assert int(lb.sum()) == sum((w + 1) * (h + 1) for _, _, w, h in rects)
    # every exact pixel is also a lithobench pixel
    assert not np.any(exact & ~lb)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 100), st.integers(0, 100), st.integers(2, 40), st.integers(2, 40), st.integers(1, 30), st.integers(1, 30))
def test_l_shaped_pgon_area(x, y, w, h, cw, ch):
    cw, ch = min(cw, w - 1), min(ch, h - 1)
    # L shape: a w x h box with its top-right cw x ch corner cut
    pts = [x, y, x + w, y, x + w, y + h - ch, x + w - cw, y + h - ch, x + w - cw, y + h, x, y + h]
    layout = parse_glp("PGON N M1 " + " ".join(map(str, pts)))
    assert layout.area() == w * h - cw * ch
    img = rasterize_exact(layout.polygons, (256, 256))
    assert int(img.sum()) == w * h - cw * ch
    lb = rasterize(layout, "lithobench", size=256, shift=(0, 0))
    # closed polygon, integer points: (w+1)(h+1) lattice points minus the cut's interior-and-open-sides points
    assert int(lb.sum()) == (w + 1) * (h + 1) - cw * ch


@pytest.mark.parametrize("text", [
    "RECT N M1 1 2 3",
    "RECT N M1 1 2 0 5",
    "PGON N M1 0 0 10 0 10",
    "PGON N M1 0 0 10 5 0 10 5 5",
    "RECT N M1 a b c d",
    "BEGIN\nENDMSG",
])
def test_malformed_glp_raises_typed_error(text):
    with pytest.raises(LayoutFormatError):
        parse_glp(text)


def test_layer_selection_in_glp():
    layout = parse_glp("RECT N M1 0 0 10 10\nRECT N M2 50 50 5 5", layer="M2")
    assert layout.area() == 25
