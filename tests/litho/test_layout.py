"""ICCAD layouts, both fill conventions, GDS/OASIS in and out through klayout.db."""
from __future__ import annotations

import numpy as np
import pytest

from worker_sdk.litho.errors import LayoutFormatError
from worker_sdk.litho.layout import (load_layout, load_mask_png, rasterize, write_mask_layout)

from .conftest import glp

AREAS = [215344, 169280, 213504, 82560, 282044, 286234, 229149, 128544, 317581, 102400]


@pytest.mark.parametrize("n", range(1, 11))
def test_exact_fill_matches_published_area_and_a2ilt_png(iccad13, n):
    layout = load_layout(glp(n, iccad13))
    exact = rasterize(layout, "exact")
    assert int(exact.sum()) == AREAS[n - 1]
    png = load_mask_png(iccad13 / "targets_png_a2ilt" / f"t{n}_0_mask.png")
    mismatch = int(np.count_nonzero(png != exact))
    assert mismatch == (86 if n == 5 else 0)  # SOURCE.md: test 5's PNG differs by 86 px


def test_lithobench_fill_is_cv2_inclusive(iccad13):
    layout = load_layout(glp(1, iccad13))
    assert int(rasterize(layout, "lithobench").sum()) == 218902


def test_oasis_and_gds_roundtrip_with_layer_selection(iccad13, tmp_path):
    import klayout.db as kdb

    layout = load_layout(glp(3, iccad13))
    img = rasterize(layout, "exact", size=2048, shift=(0, 0))
    for suffix in (".oas", ".gds"):
        path = tmp_path / f"m{suffix}"
        write_mask_layout(img, path, layer=(7, 3))
        # add a decoy layer: selection must pick 7/3
        ly = kdb.Layout()
        ly.read(str(path))
        ly.top_cells()[0].shapes(ly.layer(1, 0)).insert(kdb.Box(0, 0, 5000, 5000))
        ly.write(str(path))
        with pytest.raises(LayoutFormatError):
            load_layout(path)  # two layers, none chosen
        back = load_layout(path, "7/3")
        assert back.area() == layout.area()
        assert np.array_equal(rasterize(back, "exact", size=2048, shift=(0, 0)), img)


def test_unknown_format_and_missing_file(tmp_path):
    with pytest.raises(LayoutFormatError):
        load_layout(tmp_path / "nope.glp")
    bad = tmp_path / "x.dxf"
    bad.write_text("x")
    with pytest.raises(LayoutFormatError):
        load_layout(bad)
