"""Print topology of a tiled canvas from one core at a time, exactly as on the stitched canvas.

Each core's target and per-corner prints are labelled on their own
(4-connected); components that touch across a core boundary are joined with
union-find using the core's left column and top row against the neighbours'
right column and bottom row (kept for one row of tiles). Per component only
its box and area are kept, and per core the (target, print) pairs that
overlap. `finish()` then classifies bridges, opens, extra and missing
shapes the way `metrics.topology` does on the whole canvas.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .metrics import Labelled, label_components


class _Components:
    """Global component ids with boxes, areas and a union-find forest."""

    def __init__(self) -> None:
        self.parent: list[int] = []
        self.box: list[list[int]] = []
        self.area: list[int] = []

    def add(self, lab: Labelled, ox: int, oy: int) -> int:
        base = len(self.parent)
        for k in range(1, lab.n + 1):
            self.parent.append(base + k - 1)
            x0, y0, x1, y1 = (int(v) for v in lab.bbox[k])
            self.box.append([x0 + ox, y0 + oy, x1 + ox, y1 + oy])
            self.area.append(int(lab.area[k]))
        return base

    def find(self, a: int) -> int:
        p = self.parent
        while p[a] != a:
            p[a] = p[p[a]]
            a = p[a]
        return a

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def roots(self) -> dict[int, dict[str, Any]]:
        out: dict[int, dict[str, Any]] = {}
        for i in range(len(self.parent)):
            r = self.find(i)
            b, a = self.box[i], self.area[i]
            if r not in out:
                out[r] = {"box": list(b), "area": a}
            else:
                o = out[r]["box"]
                o[0], o[1], o[2], o[3] = min(o[0], b[0]), min(o[1], b[1]), max(o[2], b[2]), max(o[3], b[3])
                out[r]["area"] += a
        return out


def _global(lab: Labelled, base: int) -> np.ndarray:
    """Labels as global ids (-1 = background)."""
    return np.where(lab.labels > 0, lab.labels.astype(np.int64) + base - 1, -1)


def _join(comps: _Components, a: np.ndarray, b: np.ndarray) -> None:
    """Union the ids of facing pixels (same index) set on both sides of a seam."""
    both = (a >= 0) & (b >= 0)
    if both.any():
        for u, v in set(zip(a[both].tolist(), b[both].tolist())):
            comps.union(u, v)


class TopologyStitcher:
    """Feed cores in row-major tile order with `add`, then `finish()` per corner."""

    def __init__(self, corners: tuple[str, ...]) -> None:
        self.corners = corners
        self.target = _Components()
        self.prints = {c: _Components() for c in corners}
        self.pairs: dict[str, set[tuple[int, int]]] = {c: set() for c in corners}
        # (row, col) -> borders of that core: {"target"|corner: (right column ids, bottom row ids)}
        self.edges: dict[tuple[int, int], dict[str, tuple[np.ndarray, np.ndarray]]] = {}

    def add(self, row: int, col: int, origin: tuple[int, int], target: np.ndarray,
            prints: dict[str, np.ndarray]) -> None:
        ox, oy = origin
        mine: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        tl = label_components(target)
        tg = _global(tl, self.target.add(tl, ox, oy))
        self._seams(row, col, "target", self.target, tg)
        mine["target"] = (tg[:, -1].copy(), tg[-1, :].copy())
        for c in self.corners:
            pl = label_components(prints[c])
            comps = self.prints[c]
            pg = _global(pl, comps.add(pl, ox, oy))
            self._seams(row, col, c, comps, pg)
            mine[c] = (pg[:, -1].copy(), pg[-1, :].copy())
            both = (tg >= 0) & (pg >= 0)
            if both.any():
                self.pairs[c].update(zip(tg[both].tolist(), pg[both].tolist()))
        self.edges[(row, col)] = mine
        self.edges.pop((row - 2, col), None)  # only the previous row of tiles is still needed

    def _seams(self, row: int, col: int, key: str, comps: _Components, ids: np.ndarray) -> None:
        left = self.edges.get((row, col - 1))
        if left is not None:
            _join(comps, left[key][0], ids[:, 0])
        top = self.edges.get((row - 1, col))
        if top is not None:
            _join(comps, top[key][1], ids[0, :])

    def finish(self, corner: str) -> list[dict[str, Any]]:
        """Topology records of one corner (canvas px), as `metrics.topology` gives them."""
        troots, proots = self.target.roots(), self.prints[corner].roots()
        tf, pf = self.target.find, self.prints[corner].find
        pairs = {(tf(t), pf(p)) for t, p in self.pairs[corner]}
        per_print: dict[int, list[int]] = {}
        per_target: dict[int, list[int]] = {}
        for t, p in sorted(pairs):
            per_print.setdefault(p, []).append(t)
            per_target.setdefault(t, []).append(p)
        out: list[dict[str, Any]] = []

        def rec(kind: str, box: list[int], area: int, targets: list[int], prints: list[int]) -> None:
            x0, y0, x1, y1 = box
            out.append({"kind": kind, "bbox": [x0, y0, x1, y1], "x": (x0 + x1) / 2.0, "y": (y0 + y1) / 2.0,
                        "area": int(area), "target_components": targets, "print_components": prints})

        for p, info in proots.items():
            ts = per_print.get(p, [])
            if len(ts) >= 2:
                rec("bridge", info["box"], info["area"], ts, [p])
            elif not ts:
                rec("extra", info["box"], info["area"], [], [p])
        for t, info in troots.items():
            ps = per_target.get(t, [])
            if len(ps) >= 2:
                rec("open", info["box"], info["area"], [t], ps)
            elif not ps:
                rec("missing", info["box"], info["area"], [t], [])
        out.sort(key=lambda r: (r["y"], r["x"], r["kind"]))
        return out


def _join_diagonal(comps: _Components, a: np.ndarray, b: np.ndarray) -> None:
    """Union across a seam with 8-connectivity: facing pixels and the ones diagonal to them."""
    _join(comps, a, b)
    if len(a) > 1:
        _join(comps, a[:-1], b[1:])
        _join(comps, a[1:], b[:-1])


class RegionStitcher:
    """The connected error regions of a tiled canvas (L2 or PVB), one core at a time, as
    `engine.region_records` finds them on the stitched canvas: per core the 8-connected pieces
    (KLayout merges a raster's pixels that touch at a corner), joined across cores with
    union-find so each piece learns the box of the whole region it belongs to (`group_bbox`).
    Feed cores in row-major tile order with `add`, then `finish()`."""

    def __init__(self) -> None:
        self.comps = _Components()
        self.pieces: list[tuple[Any, int]] = []  # (tile, global id)
        self.edges: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}  # right column, bottom row

    def add(self, tile: Any, err: np.ndarray) -> None:
        row, col = tile.row, tile.col
        x0, y0 = tile.core[0], tile.core[1]
        lab = label_components(err, diagonal=True)
        ids = _global(lab, self.comps.add(lab, x0, y0))
        left = self.edges.get((row, col - 1))
        if left is not None:
            _join_diagonal(self.comps, left[0], ids[:, 0])
        top = self.edges.get((row - 1, col))
        if top is not None:
            _join_diagonal(self.comps, top[1], ids[0, :])
        for dc, mine, theirs in ((-1, 0, -1), (1, -1, 0)):  # corners touching the diagonal neighbours
            diag = self.edges.get((row - 1, col + dc))
            if diag is not None:
                _join(self.comps, diag[1][theirs:theirs + 1 or None], ids[0, mine:mine + 1 or None])
        self.edges[(row, col)] = (ids[:, -1].copy(), ids[-1, :].copy())
        self.edges.pop((row - 2, col), None)
        base = len(self.comps.parent) - lab.n
        self.pieces.extend((tile, base + k) for k in range(lab.n))

    def finish(self) -> list[dict[str, Any]]:
        roots = self.comps.roots()
        out = []
        for tile, gid in self.pieces:
            x0, y0, x1, y1 = self.comps.box[gid]
            out.append({"tile": tile, "area": int(self.comps.area[gid]), "bbox": [x0, y0, x1, y1],
                        "x": (x0 + x1) / 2.0, "y": (y0 + y1) / 2.0,
                        "group_bbox": list(roots[self.comps.find(gid)]["box"])})
        out.sort(key=lambda r: (r["y"], r["x"], r["tile"].tile_id))
        return out
