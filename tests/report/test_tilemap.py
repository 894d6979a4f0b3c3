"""The tile map of a tiled litho run: cells in place, coloured by L2 gain, markers counted once,
each cell a link to its tile's pictures."""
from __future__ import annotations

import re
from types import SimpleNamespace

from coordinator.report.tilemap import gain_colour, tile_cells, tile_map_html, tile_map_svg
from worker_sdk.litho.engine import Tile
from worker_sdk.litho.pictures import tile_name
from worker_sdk.litho.streaming import TileScore
from worker_sdk.litho.tiledjob import per_tile_scores


def _rows(n: int = 2, side: int = 1000) -> list[dict]:
    return [{"tile_id": f"T_{r}_{c}", "row": r, "col": c, "core_nm": [c * side, r * side, (c + 1) * side, (r + 1) * side],
             "l2_before_nm2": 1000, "l2_nm2": 1000 - 100 * (r * n + c), "pvb_nm2": 50, "epe_violations": r}
            for r in range(n) for c in range(n)]


def test_markers_count_in_the_one_tile_whose_core_holds_them() -> None:
    # a point on a shared edge belongs to the tile that starts there (half-open cores)
    cells = tile_cells(_rows(), [(1000.0, 0.0), (999.0, 999.0), (1500.0, 1500.0), (5000.0, 5000.0)])
    by_id = {c.tile_id: c for c in cells}
    assert [by_id[t].drc for t in ("T_0_0", "T_0_1", "T_1_0", "T_1_1")] == [1, 1, 0, 1]
    assert by_id["T_1_1"].markers == 2  # one DRC marker + one EPE violation
    assert by_id["T_0_1"].gain == 0.1 and by_id["T_0_0"].gain == 0.0


def test_gain_colours_run_white_to_green_and_red_for_worse() -> None:
    assert gain_colour(0.0) == "rgb(255,255,255)"
    assert gain_colour(1.0) == "rgb(38,140,38)"
    assert gain_colour(-0.5).startswith("rgb(255,") and gain_colour(None) == "#cccccc"


def test_every_cell_links_to_a_tile_block_with_its_picture() -> None:
    cells = tile_cells(_rows(3))
    images = {tile_name(c.tile_id): b"\x89PNG fake" for c in cells}
    html = tile_map_html("block", cells, images)
    links = re.findall(r'<a href="#([^"]+)"', html)
    ids = re.findall(r'<div class="tile" id="([^"]+)">', html)
    assert len(links) == 9 and sorted(links) == sorted(ids)
    assert html.count("data:image/png;base64,") == 9
    # layout y grows upwards: row 0 is drawn at the bottom of the map
    svg = tile_map_svg(cells)
    ys = {m[0]: float(m[1]) for m in re.findall(r'data-tile="(T_\d_\d)"><rect x="[^"]+" y="([^"]+)"', svg)}
    assert ys["T_0_0"] > ys["T_2_0"]


def test_tile_ids_cannot_escape_the_picture_folder_or_the_page() -> None:
    assert tile_name("../../x<script>") == "tile_xscript"
    cells = tile_cells([{**_rows(1)[0], "tile_id": '"><script>alert(1)</script>'}])
    html = tile_map_html("b", cells, {})
    assert "<script>" not in html


def test_per_tile_scores_give_cores_in_layout_nm_with_before_and_after() -> None:
    tiles = [Tile("T_0_0", 0, 0, (0, 0), (100, 200, 612, 712)), Tile("T_0_1", 0, 1, (512, 0), (612, 200, 1124, 712))]
    after = SimpleNamespace(shift=(100, 200), tiles=tiles,
                            per_tile=[TileScore("T_0_0", 40, 7, 1, 10), TileScore("T_0_1", 10, 3, 0, 10)])
    before = SimpleNamespace(per_tile=[TileScore("T_0_0", 400, 9, 5, 10), TileScore("T_0_1", 100, 2, 3, 10)])
    rows = per_tile_scores(before, after)
    assert rows[0] == {"tile_id": "T_0_0", "row": 0, "col": 0, "core_nm": [0, 0, 512, 512], "l2_before_nm2": 400,
                       "l2_nm2": 40, "pvb_nm2": 7, "epe_violations": 1}
    assert rows[1]["core_nm"] == [512, 0, 1024, 512] and rows[1]["l2_before_nm2"] == 100
