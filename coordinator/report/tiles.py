"""The tile map of a tiled litho run: one cell per tile (`T_<row>_<col>`), coloured by the
state of the task that owns it. Pure: the work queue and the attempts in, SVG out."""
from __future__ import annotations

import re
from html import escape
from typing import Any, Iterable, Mapping

from .svg import Attempt, color_for

TILE = re.compile(r"^T_(\d+)_(\d+)$")


def tiles_of_queue(queue: Mapping[str, Any]) -> dict[str, str]:
    """tile name -> node id, from the tasks' `action_spec.params.tiling.tiles`."""
    out: dict[str, str] = {}
    for task in queue.get("tasks") or []:
        if not isinstance(task, Mapping):
            continue
        tiling = (((task.get("action_spec") or {}).get("params") or {}).get("tiling") or {})
        for name in tiling.get("tiles") or [] if isinstance(tiling, Mapping) else []:
            if isinstance(name, str) and TILE.match(name):
                out.setdefault(name, str(task.get("node_id")))
    return out


def node_states(attempts: Iterable[Attempt]) -> dict[str, str]:
    """Each node's state: its last attempt's status (in start order)."""
    out: dict[str, str] = {}
    for a in sorted(attempts, key=lambda a: (a.start, a.order)):
        out[a.lane] = a.status
    return out


def tile_map_svg(tiles: Mapping[str, str], states: Mapping[str, str], *, cell: int = 18) -> str:
    """A grid of tiles; a tile whose node has not started is white."""
    if not tiles:
        return ""
    pos = {name: (int(m.group(1)), int(m.group(2))) for name in tiles if (m := TILE.match(name))}
    rows = sorted({r for r, _ in pos.values()})
    cols = sorted({c for _, c in pos.values()})
    ri, ci = {r: i for i, r in enumerate(rows)}, {c: i for i, c in enumerate(cols)}
    w, h = len(cols) * cell + 2, len(rows) * cell + 2
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="tilemap" viewBox="0 0 {w} {h}" width="{w}" '
             f'height="{h}" role="img" aria-label="tile map">']
    for name, (r, c) in sorted(pos.items()):
        node = tiles[name]
        state = states.get(node, "pending")
        fill = "#ffffff" if state == "pending" else color_for(state)
        # row 0 at the bottom, as layout coordinates grow upwards
        y = (len(rows) - 1 - ri[r]) * cell + 1
        parts.append(f'<rect data-tile="{escape(name)}" data-state="{escape(state)}" x="{ci[c] * cell + 1}" y="{y}" '
                     f'width="{cell - 2}" height="{cell - 2}" fill="{fill}" stroke="#999">'
                     f'<title>{escape(name)}: {escape(node)} {escape(state)}</title></rect>')
    parts.append("</svg>")
    return "".join(parts)
