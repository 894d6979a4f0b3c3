"""measure_geometry (8 modes) and analyze_waveguide over registered shape ids.

All geometry is integer dbu in the frame of the cell the shapes were queried
in; distances are exact Euclidean values rounded to whole dbu, microns to 6
decimals. A path's "spine" is its centerline point list.
"""
from __future__ import annotations

import math
from typing import Any

import klayout.db as kdb

from .errors import InvalidTarget, ToolLimitExceeded
from .sessions import Session, ShapeRecord
from .units import box_um, um

MODE_TARGETS = {"path_width": 1, "segment_length": 1, "centerline_distance": 2, "edge_gap": 2,
                "bend_radius_estimate": 1, "overlap": 2, "label_distance": 2, "port_spacing": 2}


def _records(session: Session, ids: list[str]) -> list[ShapeRecord]:
    out = []
    for sid in ids:
        rec = session.shapes.get(sid)
        if rec is None:
            raise InvalidTarget(f"unknown target id {sid!r}", details={"target_id": sid},
                                hints=["query_region returns shape ids; ids are valid only in their session"])
        out.append(rec)
    frames = {r.frame_cell for r in out}
    if len(frames) > 1:
        raise InvalidTarget("targets were queried in different cells", details={"frames": sorted(frames)})
    return out


def spine(rec: ShapeRecord) -> list[kdb.Point]:
    return list(rec.geometry.each_point())


def spine_length(points: list[kdb.Point]) -> float:
    return sum(points[i].distance(points[i + 1]) for i in range(len(points) - 1))


def _polygon(rec: ShapeRecord) -> kdb.Polygon:
    g = rec.geometry
    if rec.kind == "path":
        return g.polygon()
    if rec.kind == "box":
        return kdb.Polygon(g)
    if rec.kind == "polygon":
        return g
    if rec.kind == "text":
        return kdb.Polygon(kdb.Box(g.x, g.y, g.x, g.y))
    if rec.kind == "edge":
        return kdb.Polygon([g.p1, g.p2])
    raise InvalidTarget(f"cannot measure a {rec.kind}", details={"target_id": rec.id})


def _seg_point(px: float, py: float, ax: float, ay: float, bx: float, by: float) -> float:
    dx, dy = bx - ax, by - ay
    den = dx * dx + dy * dy
    t = 0.0 if den == 0 else max(0.0, min(1.0, ((px - ax) * dx + (py - ay) * dy) / den))
    return math.hypot(px - (ax + t * dx), py - (ay + t * dy))


def _seg_seg(a1: kdb.Point, a2: kdb.Point, b1: kdb.Point, b2: kdb.Point) -> float:
    if kdb.Edge(a1, a2).intersects(kdb.Edge(b1, b2)):
        return 0.0
    return min(_seg_point(a1.x, a1.y, b1.x, b1.y, b2.x, b2.y), _seg_point(a2.x, a2.y, b1.x, b1.y, b2.x, b2.y),
               _seg_point(b1.x, b1.y, a1.x, a1.y, a2.x, a2.y), _seg_point(b2.x, b2.y, a1.x, a1.y, a2.x, a2.y))


def _edges(poly: kdb.Polygon) -> list[tuple[kdb.Point, kdb.Point]]:
    return [(e.p1, e.p2) for e in poly.each_edge()]


def _polyline_distance(pa: list[kdb.Point], pb: list[kdb.Point], limit: int) -> float:
    sa = list(zip(pa, pa[1:])) or [(pa[0], pa[0])]
    sb = list(zip(pb, pb[1:])) or [(pb[0], pb[0])]
    _check_pairs(len(sa) * len(sb), limit)
    return min(_seg_seg(a1, a2, b1, b2) for a1, a2 in sa for b1, b2 in sb)


def _check_pairs(pairs: int, limit: int) -> None:
    if pairs > limit:
        raise ToolLimitExceeded("measurement would compare too many edge pairs",
                                details={"limit": "max_measure_edge_pairs", "max": limit, "pairs": pairs},
                                hints=["measure simpler shapes or smaller pieces"])


def polygon_gap(a: kdb.Polygon, b: kdb.Polygon, limit: int) -> float:
    ra, rb = kdb.Region(a), kdb.Region(b)
    if not (ra & rb).is_empty() or not ra.interacting(rb).is_empty():
        return 0.0
    ea, eb = _edges(a), _edges(b)
    _check_pairs(len(ea) * len(eb), limit)
    return min(_seg_seg(a1, a2, b1, b2) for a1, a2 in ea for b1, b2 in eb)


SHARP_DEG = 30.0


def _turning(points: list[kdb.Point]) -> list[float]:
    """Signed turning angle (radians) at each interior vertex."""
    out = []
    for i in range(1, len(points) - 1):
        ax, ay = points[i].x - points[i - 1].x, points[i].y - points[i - 1].y
        bx, by = points[i + 1].x - points[i].x, points[i + 1].y - points[i].y
        out.append(math.atan2(ax * by - ay * bx, ax * bx + ay * by))
    return out


def bend_radius(points: list[kdb.Point]) -> tuple[float | None, list[str]]:
    """Radius of the tightest bend: for each run of gently turning vertices (same sense, at most
    30 degrees each), the spine length between its first and last vertex over the run's total
    turning angle. Exact for a sampled circular arc and insensitive to grid snapping, because the
    total turning is fixed by the tangents entering and leaving the bend. None when straight."""
    theta = _turning(points)
    warnings: list[str] = []
    if any(abs(t) > math.radians(SHARP_DEG) for t in theta):
        warnings.append("sharp_corner: a vertex turns by more than 30 degrees; it is not counted as a bend")
    radii = []
    i = 0
    while i < len(theta):
        t = theta[i]
        if 1e-9 < abs(t) <= math.radians(SHARP_DEG):
            j = i
            while j + 1 < len(theta) and 1e-9 < abs(theta[j + 1]) <= math.radians(SHARP_DEG) \
                    and (theta[j + 1] > 0) == (t > 0):
                j += 1
            # vertex k of theta is point k+1; segments between points i+1 .. j+1
            length = sum(points[k].distance(points[k + 1]) for k in range(i + 1, j + 1))
            total = sum(abs(x) for x in theta[i:j + 1])
            if length > 0:
                radii.append(length / total)
            i = j + 1
        else:
            i += 1
    if not radii:
        return None, warnings
    if len(radii) > 1:
        warnings.append(f"multiple_bends: {len(radii)} bends; the smallest radius is reported")
    return min(radii), warnings


def _ports(rec: ShapeRecord) -> list[tuple[float, float]]:
    g = rec.geometry
    if rec.kind == "path":
        pts = spine(rec)
        return [(pts[0].x, pts[0].y), (pts[-1].x, pts[-1].y)]
    if rec.kind == "text":
        return [(g.x, g.y)]
    c = rec.bbox.center()
    return [(c.x, c.y)]


def measure(session: Session, mode: str, target_ids: list[str], pair_limit: int) -> dict[str, Any]:
    need = MODE_TARGETS[mode]
    if len(target_ids) != need:
        raise InvalidTarget(f"{mode} takes {need} target id(s)", details={"mode": mode, "expected": need,
                                                                         "got": len(target_ids)})
    recs = _records(session, target_ids)
    dbu = session.dbu
    details: dict[str, Any]
    value: float | None
    area = False
    if mode == "path_width":
        r = recs[0]
        if r.kind == "path":
            value, details = r.geometry.width, {"method": "path_width"}
        elif r.kind == "box":
            value, details = min(r.bbox.width(), r.bbox.height()), {"method": "box_min_dimension"}
        else:
            raise InvalidTarget("path_width needs a path or box", details={"target_id": r.id, "kind": r.kind})
    elif mode == "segment_length":
        r = recs[0]
        if r.kind == "path":
            pts = spine(r)
            value = spine_length(pts)
            details = {"method": "path_spine_length", "segment_count": max(0, len(pts) - 1)}
        elif r.kind == "edge":
            value, details = r.geometry.length(), {"method": "edge_length"}
        elif r.kind == "box":
            value, details = max(r.bbox.width(), r.bbox.height()), {"method": "box_max_dimension"}
        else:
            raise InvalidTarget("segment_length needs a path, edge or box", details={"target_id": r.id,
                                                                                     "kind": r.kind})
    elif mode == "centerline_distance":
        a, b = recs
        if a.kind == "path" and b.kind == "path":
            value = _polyline_distance(spine(a), spine(b), pair_limit)
            details = {"method": "min_distance_between_path_spines"}
        else:
            ca, cb = a.bbox.center(), b.bbox.center()
            value, details = ca.distance(cb), {"method": "bbox_center_distance"}
    elif mode == "edge_gap":
        a, b = recs
        value = polygon_gap(_polygon(a), _polygon(b), pair_limit)
        details = {"method": "edge_to_edge_polygon_distance", "touching_or_overlapping": value == 0.0}
    elif mode == "bend_radius_estimate":
        r = recs[0]
        if r.kind != "path":
            raise InvalidTarget("bend_radius_estimate needs a path", details={"target_id": r.id, "kind": r.kind})
        value, warnings = bend_radius(spine(r))
        details = {"method": "spine_length_over_turning_angle", "warnings": warnings}
    elif mode == "overlap":
        a, b = recs
        value = float((kdb.Region(_polygon(a)) & kdb.Region(_polygon(b))).area())
        details = {"method": "polygon_boolean_and_area", "unit": "area"}
        area = True
    elif mode == "label_distance":
        a, b = recs
        if "text" not in (a.kind, b.kind):
            raise InvalidTarget("label_distance needs at least one text target",
                                details={"kinds": [a.kind, b.kind]})
        t, o = (a, b) if a.kind == "text" else (b, a)
        px, py = t.geometry.x, t.geometry.y
        if o.kind == "text":
            value = math.hypot(px - o.geometry.x, py - o.geometry.y)
        else:
            poly = _polygon(o)
            inside = poly.inside(kdb.Point(px, py))
            value = 0.0 if inside else min(_seg_point(px, py, p.x, p.y, q.x, q.y) for p, q in _edges(poly))
        details = {"method": "label_anchor_to_shape_distance"}
    else:  # port_spacing
        a, b = recs
        pa, pb = _ports(a), _ports(b)
        value = min(math.hypot(x1 - x2, y1 - y2) for x1, y1 in pa for x2, y2 in pb)
        details = {"method": "min_distance_between_port_points",
                   "port_rule": "path: spine end points; text: anchor; other: bbox center"}
    if value is None:
        return {"session_id": session.id, "mode": mode, "target_ids": target_ids, "value_um": None,
                "value_dbu": None, "details": details}
    value_um = value * dbu * dbu if area else value * dbu
    return {"session_id": session.id, "mode": mode, "target_ids": target_ids, "value_um": um(value_um),
            "value_dbu": int(round(value)), "details": details}


def analyze_waveguide(session: Session, target_id: str) -> dict[str, Any]:
    rec = session.shapes.get(target_id)
    if rec is None:
        raise InvalidTarget(f"unknown target id {target_id!r}", details={"target_id": target_id})
    if rec.kind != "path":
        raise InvalidTarget("analyze_waveguide needs a path shape", details={"target_id": target_id,
                                                                            "kind": rec.kind})
    dbu = session.dbu
    pts = spine(rec)
    segs = list(zip(pts, pts[1:]))
    axis = [p.x == q.x or p.y == q.y for p, q in segs]
    horiz = [p.y == q.y and p.x != q.x for p, q in segs]
    vert = [p.x == q.x and p.y != q.y for p, q in segs]
    if not segs or all(p == q for p, q in segs):
        orientation = "point"
    elif all(horiz):
        orientation = "horizontal"
    elif all(vert):
        orientation = "vertical"
    elif len(segs) == 1:
        orientation = "diagonal"
    else:
        orientation = "mixed"
    radius, warnings = bend_radius(pts)
    warnings = list(warnings)
    if rec.geometry.round:
        warnings.append("round_ends: the path has round end caps")
    if rec.geometry.bgn_ext or rec.geometry.end_ext:
        warnings.append("extended_ends: segment_length_um excludes the begin/end extensions")
    c = rec.bbox.center()
    return {"session_id": session.id, "target_id": target_id, "kind": "path", "cell": rec.cell,
            "layer": rec.layer, "bbox_um": box_um(rec.bbox, dbu),
            "center_um": {"x": um(c.x * dbu), "y": um(c.y * dbu)},
            "path_width_um": um(rec.geometry.width * dbu), "segment_length_um": um(spine_length(pts) * dbu),
            "bend_radius_estimate_um": None if radius is None else um(radius * dbu), "orientation": orientation,
            "is_path": True, "is_axis_aligned": bool(segs) and all(axis), "analysis_warnings": warnings,
            "point_count": len(pts)}
