"""Report pictures of a clip (python -m worker_sdk.litho.pictures): 480 px
pictures with a scale bar, and close-ups centred on given points (DRC markers)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st
from PIL import Image

from tests.conftest import REPO_ROOT
from worker_sdk.litho.pictures import CROP_NM, CROP_SIZE, NICE_NM, SIZE, crop_box, scale_bar_nm


@given(st.floats(min_value=50, max_value=1e5))
def test_scale_bar_is_a_round_length_at_most_a_fifth_of_the_width(width_nm: float) -> None:
    n = scale_bar_nm(width_nm)
    assert n in NICE_NM
    assert n <= width_nm / 5 or n == NICE_NM[0]
    bigger = [m for m in NICE_NM if m > n]
    assert not bigger or bigger[0] > width_nm / 5  # the longest that fits


@given(st.integers(-500, 2600), st.integers(-500, 2600), st.integers(300, 2048), st.integers(300, 2048))
def test_crop_box_is_a_full_window_inside_the_canvas_around_the_point(cx, cy, h, w) -> None:
    y0, x0, y1, x1 = crop_box(cx, cy, (h, w))
    assert y1 - y0 == x1 - x0 == CROP_NM
    assert 0 <= y0 and y1 <= h and 0 <= x0 and x1 <= w
    if CROP_NM // 2 <= cx <= w - CROP_NM // 2 and CROP_NM // 2 <= cy <= h - CROP_NM // 2:
        assert (x0 + CROP_NM // 2, y0 + CROP_NM // 2) == (cx, cy)  # centred when it can be


@pytest.fixture(scope="module")
def pictures(tmp_path_factory, iccad13: Path) -> dict:
    """The target of clip 1 as its own mask, with close-ups at a point inside a
    shape and a point in empty space (layout nm)."""
    from worker_sdk.litho.layout import load_layout

    out = tmp_path_factory.mktemp("pictures")
    layout = iccad13 / "layouts" / "M1_test1.glp"
    poly = load_layout(layout).polygons[0]
    xs, ys = [p[0] for p in poly], [p[1] for p in poly]
    inside = {"x_nm": (min(xs) + max(xs)) // 2, "y_nm": (min(ys) + max(ys)) // 2}
    x0, y0, _, _ = load_layout(layout).bbox()
    outside = {"x_nm": x0 - 100, "y_nm": y0 - 100}
    crops = out / "crops.json"
    crops.write_text(json.dumps([inside, outside]))
    res = subprocess.run([sys.executable, "-m", "worker_sdk.litho.pictures", "--layout", str(layout),
                          "--mask", str(layout), "--out", str(out / "png"),
                          "--crops", str(crops)], capture_output=True, text=True, timeout=600,
                         cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert res.returncode == 0, res.stderr[-2000:]
    return {"dir": out / "png", "inside": inside}


def _rgb(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB")).astype(int)


def test_pictures_are_480_px_with_a_scale_bar(pictures: dict) -> None:
    names = sorted(p.name for p in pictures["dir"].glob("*.png"))
    assert names == ["crop_00.png", "crop_01.png", "mask.png", "print_max.png", "print_min.png",
                     "print_nominal.png", "target.png", "violations.png"]
    for name in ("target", "mask", "print_nominal", "violations"):
        img = _rgb(pictures["dir"] / f"{name}.png")
        assert img.shape == (SIZE, SIZE, 3)
        corner = img[SIZE - 30:, :120]  # the bar and its label, bottom left, black on white
        assert (corner.max(axis=2) < 40).sum() > 60, name


def test_close_ups_are_centred_on_their_points(pictures: dict) -> None:
    inside = _rgb(pictures["dir"] / "crop_00.png")
    assert inside.shape == (CROP_SIZE, CROP_SIZE, 3)
    c = CROP_SIZE // 2
    assert inside[c, c].max() < 200  # the point is inside a shape: not white
    orange = (inside[:, :, 0] > 230) & (inside[:, :, 1] > 110) & (inside[:, :, 1] < 170) & (inside[:, :, 2] < 60)
    ys, xs = np.nonzero(orange)
    assert ys.size > 20 and abs(ys.mean() - c) < 2 and abs(xs.mean() - c) < 2  # the marker ring, centred
    empty = _rgb(pictures["dir"] / "crop_01.png")
    assert tuple(empty[c + 10, c + 10]) == (255, 255, 255)  # empty space is white
