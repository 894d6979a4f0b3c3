"""The tile map of a tiled litho run: the whole layout, one cell per tile.

Each cell is coloured by the tile's L2 gain (how much of the unoptimised
L2 the ILT removed: white for none, deep green for all, red where the tile got
worse), labelled with its gain and its markers (EPE violations of the tile plus
DRC markers inside its core), and links to the tile's pictures further down the
page. The numbers come from the stitched mask's metrics report
(`tiling.per_tile`, written by the litho engine); the pictures from the same
child-process renderer as the clip pictures. Pure functions of those inputs.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass
from html import escape
from typing import Any, Iterable, Mapping

MAP_PX = 640  # the map's longest side in CSS px


@dataclass(frozen=True)
class TileCell:
    tile_id: str
    row: int
    col: int
    core_nm: tuple[int, int, int, int]  # x0, y0, x1, y1
    l2_before: int | None
    l2_after: int
    pvb: int
    epe: int
    drc: int  # DRC markers inside the core

    @property
    def gain(self) -> float | None:
        """Fraction of the tile's unoptimised L2 that the ILT removed (None without a baseline)."""
        if not self.l2_before:
            return None
        return (self.l2_before - self.l2_after) / self.l2_before

    @property
    def markers(self) -> int:
        return self.epe + self.drc

    @property
    def anchor(self) -> str:
        return "tile-" + "".join(ch for ch in self.tile_id if ch.isalnum() or ch in "_-")


def tile_cells(per_tile: Iterable[Mapping[str, Any]], drc_points: Iterable[tuple[float, float]] = ()) -> list[TileCell]:
    """Cells from a metrics report's `tiling.per_tile` rows; each DRC marker point (layout nm) counts
    in the tile whose core holds it (cores are half-open, so a point counts once)."""
    points = list(drc_points)
    cells = []
    for r in per_tile:
        x0, y0, x1, y1 = (int(v) for v in r["core_nm"])
        drc = sum(1 for x, y in points if x0 <= x < x1 and y0 <= y < y1)
        before = r.get("l2_before_nm2")
        cells.append(TileCell(str(r["tile_id"]), int(r["row"]), int(r["col"]), (x0, y0, x1, y1),
                              None if before is None else int(before), int(r["l2_nm2"]), int(r.get("pvb_nm2") or 0),
                              int(r.get("epe_violations") or 0), drc))
    return sorted(cells, key=lambda c: (c.row, c.col))


def gain_colour(gain: float | None) -> str:
    """White (no gain) to green (all of L2 removed); red for a tile made worse; grey without a baseline."""
    if gain is None:
        return "#cccccc"
    if gain < 0:
        k = min(1.0, -gain)
        return f"rgb(255,{round(255 * (1 - 0.7 * k))},{round(255 * (1 - 0.7 * k))})"
    k = min(1.0, gain)
    return f"rgb({round(255 * (1 - 0.85 * k))},{round(255 * (1 - 0.45 * k))},{round(255 * (1 - 0.85 * k))})"


def tile_map_svg(cells: list[TileCell]) -> str:
    """An SVG of the layout's tiles in place (y up), each a link to its pictures."""
    if not cells:
        return ""
    x0 = min(c.core_nm[0] for c in cells)
    y0 = min(c.core_nm[1] for c in cells)
    x1 = max(c.core_nm[2] for c in cells)
    y1 = max(c.core_nm[3] for c in cells)
    scale = MAP_PX / max(x1 - x0, y1 - y0, 1)
    w, h = round((x1 - x0) * scale), round((y1 - y0) * scale)
    parts = [f'<svg class="tilemap" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" '
             f'style="width:100%;max-width:{w}px;height:auto" role="img" aria-label="tile map">']
    for c in cells:
        cx0, cy0, cx1, cy1 = c.core_nm
        x, y = (cx0 - x0) * scale, (y1 - cy1) * scale  # SVG y grows downwards, layout y upwards
        cw, ch = (cx1 - cx0) * scale, (cy1 - cy0) * scale
        gain = "n/a" if c.gain is None else f"{100 * c.gain:.0f}%"
        font = max(8, min(14, round(cw / 7)))
        parts.append(
            f'<a href="#{c.anchor}" data-tile="{escape(c.tile_id)}"><rect x="{x:.1f}" y="{y:.1f}" width="{cw:.1f}" '
            f'height="{ch:.1f}" fill="{gain_colour(c.gain)}" stroke="#555" stroke-width="1">'
            f'<title>{escape(c.tile_id)}: L2 {c.l2_after} nm² (was {c.l2_before}), gain {gain}, '
            f'{c.markers} markers</title></rect>'
            f'<text x="{x + cw / 2:.1f}" y="{y + ch / 2:.1f}" font-size="{font}" text-anchor="middle">{gain}</text>'
            + (f'<text x="{x + cw / 2:.1f}" y="{y + ch / 2 + font + 2:.1f}" font-size="{font}" text-anchor="middle" '
               f'fill="#b00">{c.markers} ●</text>' if c.markers else "")
            + "</a>")
    parts.append("</svg>")
    return "".join(parts)


def tile_map_html(name: str, cells: list[TileCell], images: Mapping[str, bytes]) -> str:
    """The tile map section: the map, then one block per tile (its numbers and picture), which the
    map's cells link to. `images` maps a tile's picture stem (tile_<id>) to PNG bytes."""
    if not cells:
        return ""
    gains = [c.gain for c in cells if c.gain is not None]
    mean = f"{100 * sum(gains) / len(gains):.0f}%" if gains else "n/a"
    blocks = []
    for c in cells:
        png = images.get("tile_" + c.anchor[len("tile-"):])
        pic = (f'<img alt="tile {escape(c.tile_id)}: target, mask and nominal print" '
               f'src="data:image/png;base64,{base64.b64encode(png).decode()}">' if png else
               '<p class="muted">No picture.</p>')
        gain = "n/a" if c.gain is None else f"{100 * c.gain:.1f}%"
        blocks.append(f'<div class="tile" id="{c.anchor}"><h4>{escape(c.tile_id)} (row {c.row}, column {c.col})</h4>'
                      f'<p>L2 {c.l2_after} nm² (unoptimised {c.l2_before}), gain {gain}; PVB {c.pvb} nm²; '
                      f'{c.epe} EPE violations, {c.drc} DRC markers</p>{pic}</div>')
    return (f'<h3 id="tilemap-{escape(name)}">Tile map: {escape(name)}</h3>'
            f'<p class="muted">{len(cells)} tiles, mean L2 gain {mean}. Colour is the L2 gain (white none, green '
            f'all of the unoptimised L2 removed, red worse); the red count is the tile\'s markers. Click a tile for '
            f'its pictures (grey target, black mask, blue nominal print).</p>'
            f'<div style="max-width:100%;overflow-x:auto">{tile_map_svg(cells)}</div>'
            f'<style>.tile:target{{outline:3px solid #2a7}}.tilemap text{{pointer-events:none}}</style>'
            + "".join(blocks))
