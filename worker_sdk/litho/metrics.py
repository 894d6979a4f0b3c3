"""L2, PVB and EPE, each as a number and as per-location records (canvas frame, nm).

- L2  = #pixels where the nominal print differs from the target (nm^2).
- PVB = #pixels where the max and min corner prints differ (nm^2).
- EPE = #target-edge samples that violate the 15 nm constraint. Edges of the
  merged target are sampled every 40 nm starting 40 nm in from both ends; an
  edge of 80 nm or less is sampled once at its centre. A sample violates when
  the nominal print is 0 at the pixel 15 px inside the edge or 1 at the pixel
  15 px outside it (the pixel adjacent to the edge counts as the first). The
  edge is where the *rasterized* target changes, so right/top edges sit one
  pixel further out under the lithobench fill.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .layout import Layout, raster_to_region

EPE_CONSTRAINT_NM = 15
EPE_SPACING_NM = 40


@dataclass(frozen=True)
class EdgeSample:
    x: float  # canvas nm, point on the edge
    y: float
    normal: tuple[int, int]  # unit vector pointing out of the shape
    inside_px: tuple[int, int]  # (row, col)
    outside_px: tuple[int, int]


def _positions(a: int, b: int) -> list[float]:
    length = b - a
    if length <= 2 * EPE_SPACING_NM:
        return [(a + b) / 2.0]
    out = []
    p = a + EPE_SPACING_NM
    while p <= b - EPE_SPACING_NM:
        out.append(float(p))
        p += EPE_SPACING_NM
    return out


def edge_samples(layout: Layout, shift: tuple[int, int], fill: str, size: int) -> list[EdgeSample]:
    """EPE sample points of the merged target, in canvas pixel coordinates."""
    import klayout.db as kdb

    region = kdb.Region()
    dx, dy = shift
    for poly in layout.polygons:
        region.insert(kdb.Polygon([kdb.Point(x + dx, y + dy) for x, y in poly]))
    region.merge()
    d = EPE_CONSTRAINT_NM
    samples: list[EdgeSample] = []
    for edge in region.edges().each():
        x1, y1, x2, y2 = edge.p1.x, edge.p1.y, edge.p2.x, edge.p2.y
        # KLayout hulls are clockwise: the interior lies to the right of p1->p2.
        ex, ey = np.sign(x2 - x1), np.sign(y2 - y1)
        nx, ny = -ey, ex  # outward normal = left of the direction
        nx, ny = int(nx), int(ny)
        if x1 == x2:  # vertical edge at x = x1
            bound = x1 + (1 if (fill == "lithobench" and nx > 0) else 0)
            for yp in _positions(min(y1, y2), max(y1, y2)):
                row = int(np.floor(yp))
                if nx > 0:  # outside is +x
                    inside, outside = (row, bound - d), (row, bound + d - 1)
                else:
                    inside, outside = (row, bound + d - 1), (row, bound - d)
                samples.append(EdgeSample(float(bound), yp, (nx, ny), inside, outside))
        else:  # horizontal edge at y = y1
            bound = y1 + (1 if (fill == "lithobench" and ny > 0) else 0)
            for xp in _positions(min(x1, x2), max(x1, x2)):
                col = int(np.floor(xp))
                if ny > 0:
                    inside, outside = (bound - d, col), (bound + d - 1, col)
                else:
                    inside, outside = (bound + d - 1, col), (bound - d, col)
                samples.append(EdgeSample(xp, float(bound), (nx, ny), inside, outside))
    samples.sort(key=lambda s: (s.y, s.x, s.normal))
    return [s for s in samples if all(0 <= v < size for v in (*s.inside_px, *s.outside_px))]


def epe_check(samples: list[EdgeSample], nominal: np.ndarray) -> list[dict[str, Any]]:
    """One record per violating sample: kind 'inner' (print missing inside) or 'outer' (print outside)."""
    out = []
    for s in samples:
        inner = not nominal[s.inside_px]
        outer = bool(nominal[s.outside_px])
        if inner or outer:
            out.append({"x": s.x, "y": s.y, "normal": list(s.normal),
                        "kind": "inner" if inner and not outer else ("outer" if outer and not inner else "both")})
    return out


def components(binary: np.ndarray) -> list[dict[str, Any]]:
    """Connected regions of a binary map (edge-connected, merged by klayout): area, bbox, centre (pixels)."""
    if not binary.any():
        return []
    region = raster_to_region(binary)
    out = []
    for poly in region.each():
        box = poly.bbox()
        area = poly.area()
        out.append({"area": int(area), "bbox": [box.left, box.bottom, box.right, box.top],
                    "x": (box.left + box.right) / 2.0, "y": (box.bottom + box.top) / 2.0})
    out.sort(key=lambda c: (c["y"], c["x"], -c["area"]))
    return out


def score(l2: int, pvb: int, epe: int) -> dict[str, Any]:
    return {"l2_nm2": int(l2), "pvb_nm2": int(pvb), "epe_violations": int(epe)}
