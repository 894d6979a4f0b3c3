"""query_region: shapes, instances and texts touching a box, with session-stable ids.

Shapes are collected per layer (layers in layer/datatype order) through
KLayout's region-confined recursive iterator, so the scan cost is what a
hand-written klayout.db loop costs; only the returned shapes get ids and dicts.
The ordering is layer, datatype, kind, bbox (left, bottom, right, top), then
cell and instance path; summary counts are before truncation.
"""
from __future__ import annotations

import hashlib
import heapq
from typing import Any

import klayout.db as kdb

from .errors import InvalidBox, QueryTooLarge, ToolLimitExceeded
from .layers import layer_ref, resolve_layers
from .loader import cell_or_error
from .sessions import Session, ShapeRecord
from .units import box_dbu, box_um, finite, um

KIND_RANK = {"box": 0, "edge": 1, "path": 2, "point": 3, "polygon": 4, "text": 5}
DBU_LIMIT = 2**31 - 1


def box_from_request(box: dict[str, Any], dbu: float) -> kdb.Box:
    vals = [box["left"], box["bottom"], box["right"], box["top"]]
    if not finite(*vals):
        raise InvalidBox("box coordinates must be finite numbers", details={"box": box})
    if not (box["left"] < box["right"] and box["bottom"] < box["top"]):
        raise InvalidBox("box needs left < right and bottom < top", details={"box": box})
    ints = [int(round(v / dbu)) for v in vals]
    if any(abs(v) > DBU_LIMIT for v in ints):
        raise InvalidBox("box exceeds the 32-bit database range", details={"box": box, "dbu": dbu})
    if ints[0] == ints[2] or ints[1] == ints[3]:
        raise InvalidBox("box is narrower than one database unit", details={"box": box, "dbu": dbu})
    return kdb.Box(*ints)


_T = kdb.Shape
TYPE_KIND = {}
for _name, _kind_name in (("TBox", "box"), ("TBoxArray", "box"), ("TBoxArrayMember", "box"), ("TShortBox", "box"),
                          ("TShortBoxArray", "box"), ("TShortBoxArrayMember", "box"), ("TEdge", "edge"),
                          ("TEdgePair", "edge"), ("TPath", "path"), ("TPathRef", "path"), ("TPathPtrArray", "path"),
                          ("TPathPtrArrayMember", "path"), ("TPoint", "point"), ("TText", "text"),
                          ("TTextRef", "text"), ("TTextPtrArray", "text"), ("TTextPtrArrayMember", "text")):
    if hasattr(_T, _name):
        TYPE_KIND[getattr(_T, _name)] = _kind_name
TYPE_RANK = {code: KIND_RANK[k] for code, k in TYPE_KIND.items()}
POLYGON_RANK = KIND_RANK["polygon"]


def _geometry(shape: kdb.Shape, kind: str, trans: kdb.ICplxTrans) -> Any:
    if kind == "box":
        return shape.box.transformed(trans) if trans.is_ortho() else shape.polygon.transformed(trans)
    if kind == "path":
        return shape.path.transformed(trans)
    if kind == "text":
        return shape.text.transformed(trans)
    if kind == "edge":
        return shape.edge.transformed(trans)
    if kind == "point":
        return shape.point.transformed(trans) if hasattr(shape, "point") else shape.bbox().transformed(trans)
    return shape.polygon.transformed(trans)


def _path_names(layout: kdb.Layout, frame: kdb.Cell, elements: list) -> tuple[str, ...]:
    names = [frame.name]
    for el in elements:
        names.append(layout.cell(el.cell_inst().cell_index).name)
    return tuple(names)


def _path_key(elements: list) -> str:
    return ";".join(f"{el.cell_inst().cell_index}:{el.ia()}:{el.ib()}:{el.specific_trans()}" for el in elements)


RANK_KIND = {v: k for k, v in KIND_RANK.items()}


def _register(session: Session, frame: kdb.Cell, hit: tuple, hierarchy_mode: str,
              layer_cache: dict[int, dict[str, Any]], frame_name: str) -> ShapeRecord:
    layout = session.layout
    (_rank, kind_rank, l, b, r, t, li, (cell_name, elements), shape, trans) = hit
    kind = RANK_KIND[kind_rank]
    geom = _geometry(shape, kind, trans)
    if hierarchy_mode == "flattened":
        inst_path: tuple[str, ...] = (frame_name,)
        origin = frame_name
    else:
        inst_path = _path_names(layout, frame, elements) if elements else (frame_name,)
        origin = cell_name
    key = "|".join([session.source["sha256"], "F" if hierarchy_mode == "flattened" else "H", frame_name, cell_name,
                     _path_key(elements) if elements else "", str(li), kind, str(geom)])
    digest = hashlib.sha256(key.encode()).hexdigest()
    sid = "shp_" + digest[:8]
    n = 8
    while sid in session.shapes and session.shapes[sid].geometry != geom:
        n += 2
        sid = "shp_" + digest[:n]
    existing = session.shapes.get(sid)
    if existing is not None:
        return existing
    if len(session.shapes) >= session_id_limit(session):
        raise ToolLimitExceeded("too many shape ids registered in this session",
                                details={"limit": "max_ids_per_session", "max": session_id_limit(session)},
                                hints=["open a new session"])
    lref = layer_cache.get(li)
    if lref is None:
        lref = layer_cache[li] = layer_ref(layout, li)
    rec = ShapeRecord(id=sid, kind=kind, frame_cell=frame_name, cell=origin, instance_path=inst_path,
                      layer=lref, geometry=geom, bbox=kdb.Box(l, b, r, t),
                      text=geom.string if kind == "text" else None)
    session.shapes[sid] = rec
    return rec


def session_id_limit(session: Session) -> int:
    return session.id_limit


def shape_dict(rec: ShapeRecord, dbu: float) -> dict[str, Any]:
    out: dict[str, Any] = {"id": rec.id, "kind": rec.kind, "cell": rec.cell, "instance_path": list(rec.instance_path),
                           "layer": rec.layer, "bbox_um": box_um(rec.bbox, dbu), "bbox_dbu": box_dbu(rec.bbox)}
    g = rec.geometry
    if rec.kind == "path":
        out["point_count"] = int(g.num_points())
        out["path_width_um"] = um(g.width * dbu)
        out["path_width_dbu"] = int(g.width)
    elif rec.kind in ("polygon",):
        out["point_count"] = int(g.num_points())
    elif rec.kind == "box":
        out["point_count"] = 4
    elif rec.kind == "text":
        out["text"] = rec.text
        out["position_um"] = {"x": um(g.x * dbu), "y": um(g.y * dbu)}
    return out


def query_region(session: Session, request: dict[str, Any], *, max_shapes_cap: int, max_instances_cap: int,
                 scan_limit: int) -> dict[str, Any]:
    layout = session.layout
    dbu = layout.dbu
    frame = cell_or_error(layout, request.get("cell", session.top_cell))
    box = box_from_request(request["box"], dbu)
    mode = request.get("hierarchy_mode", "recursive")
    max_shapes = request.get("max_shapes", 200)
    max_instances = request.get("max_instances", 100)
    if max_shapes > max_shapes_cap or max_instances > max_instances_cap:
        raise QueryTooLarge("max_shapes or max_instances is above the per-response cap",
                            details={"max_shapes": max_shapes, "max_shapes_cap": max_shapes_cap,
                                     "max_instances": max_instances, "max_instances_cap": max_instances_cap},
                            hints=["page with smaller boxes"])
    layer_indexes = resolve_layers(layout, request.get("layers"))

    shape_hits: list[tuple] = []
    text_hits: list[tuple] = []
    dropped_shapes = dropped_texts = 0  # hits already discarded by the running top-k selection
    trim_at = 4 * max_shapes + 4096
    rank_of = TYPE_RANK.get
    for rank, li in enumerate(layer_indexes):
        it = frame.begin_shapes_rec_touching(li, box)
        if mode == "top":
            it.max_depth = 0
        append = shape_hits.append
        for item in it.each():  # the hot loop: one bbox and one type lookup per shape
            shape = item.shape()
            trans = item.trans()
            bb = shape.bbox().transformed(trans)
            kind_rank = rank_of(shape.type(), POLYGON_RANK)
            hit = (rank, kind_rank, bb.left, bb.bottom, bb.right, bb.top, li, None, shape, trans)
            if kind_rank != 5:
                append(hit)
                if len(shape_hits) > trim_at:
                    dropped_shapes += len(shape_hits) - max_shapes
                    shape_hits[:] = heapq.nsmallest(max_shapes, shape_hits, key=_sort_key)
                    if dropped_shapes + dropped_texts > scan_limit:
                        _too_large(scan_limit, box, dbu)
            else:
                text_hits.append(hit)
                if len(text_hits) > trim_at:
                    dropped_texts += len(text_hits) - max_shapes
                    text_hits[:] = heapq.nsmallest(max_shapes, text_hits, key=_sort_key)
                    if dropped_shapes + dropped_texts > scan_limit:
                        _too_large(scan_limit, box, dbu)
            # instance paths are recovered only for the hits that are returned (see _with_path)
        if dropped_shapes + dropped_texts + len(shape_hits) + len(text_hits) > scan_limit:
            _too_large(scan_limit, box, dbu)
    n_shapes = dropped_shapes + len(shape_hits)
    n_texts = dropped_texts + len(text_hits)

    best_shapes = heapq.nsmallest(max_shapes, shape_hits, key=_sort_key)
    best_texts = heapq.nsmallest(max_shapes, text_hits, key=_sort_key)
    lc: dict[int, dict[str, Any]] = {}
    fi, fn = frame.cell_index(), frame.name
    shapes = [shape_dict(_register(session, frame, _with_path(frame, h, box, mode, fi, fn), mode, lc, fn), dbu)
              for h in best_shapes]
    texts = [shape_dict(_register(session, frame, _with_path(frame, h, box, mode, fi, fn), mode, lc, fn), dbu)
             for h in best_texts]
    shapes.sort(key=_dict_key)
    texts.sort(key=_dict_key)

    instances, n_inst = _instances(session, frame, box, mode, max_instances)
    return {
        "session_id": session.id, "box_um": box_um(box, dbu), "box_dbu": box_dbu(box), "cell": frame.name,
        "hierarchy_mode": mode,
        "summary": {"shape_count": n_shapes, "instance_count": n_inst, "text_count": n_texts},
        "shapes": shapes, "instances": instances, "texts": texts,
        "truncation": {"shapes_dropped": n_shapes - len(shapes), "instances_dropped": n_inst - len(instances),
                       "texts_dropped": n_texts - len(texts)},
    }


def _too_large(scan_limit: int, box: kdb.Box, dbu: float) -> None:
    raise QueryTooLarge("the box touches more shapes than the scan limit",
                        details={"scan_limit": scan_limit, "box_um": box_um(box, dbu)},
                        hints=["query a smaller box or fewer layers", "KLAYOUT_MCP_QUERY_SCAN_LIMIT raises the limit"])


def _sort_key(hit: tuple) -> tuple:
    # layer rank, kind, bbox (left, bottom, right, top), layer index; exact ties keep the iterator's
    # order, which is deterministic for a given layout
    return hit[:7]


def _dict_key(d: dict[str, Any]) -> tuple:
    b = d["bbox_dbu"]
    return (d["layer"]["layer"], d["layer"]["datatype"], KIND_RANK[d["kind"]], b["left"], b["bottom"], b["right"],
            b["top"], d["cell"], d["instance_path"], d["id"])


def _with_path(frame: kdb.Cell, hit: tuple, box: kdb.Box, mode: str, frame_index: int = -1,
               frame_name: str = "") -> tuple:
    """Recover the origin cell and instance path of a kept hit (only done for returned shapes).
    Returns the hit with slot 7 set to (origin cell name, instance elements)."""
    shape = hit[8]
    if mode == "top":
        return hit[:7] + ((frame_name or frame.name, []),) + hit[8:]
    origin = shape.cell
    if origin.cell_index() == (frame_index if frame_index >= 0 else frame.cell_index()):
        return hit[:7] + ((frame_name or frame.name, []),) + hit[8:]
    it = frame.begin_shapes_rec_touching(hit[6], kdb.Box(hit[2], hit[3], hit[4], hit[5]))
    want = str(hit[9])
    for item in it.each():
        if item.shape() == shape and str(item.trans()) == want:
            return hit[:7] + ((origin.name, list(item.path())),) + hit[8:]
    return hit[:7] + ((origin.name, []),) + hit[8:]


def _instances(session: Session, frame: kdb.Cell, box: kdb.Box, mode: str, max_instances: int
               ) -> tuple[list[dict[str, Any]], int]:
    if mode == "flattened":
        return [], 0
    layout = session.layout
    dbu = layout.dbu
    if mode == "top":
        return _top_instances(session, frame, box, max_instances)
    it = frame.begin_instances_rec_touching(box)
    rows = []
    while not it.at_end():
        el = it.current_inst_element()
        inst = el.inst()
        child = layout.cell(inst.cell_index)
        t = it.trans() * el.specific_trans()
        bb = child.bbox().transformed(t)
        path_names = _path_names(layout, frame, list(it.path()))
        rows.append((bb.left, bb.bottom, bb.right, bb.top, child.name, path_names, el.ia(), el.ib(), t))
        it.next()
    rows.sort(key=lambda r: (r[:5], r[5], r[6], r[7]))
    out = []
    for (l, b, r, t_, name, path_names, ia, ib, t) in rows[:max_instances]:
        bb = kdb.Box(l, b, r, t_)
        out.append({"child_cell": name, "parent_cell": path_names[-1], "instance_path": list(path_names) + [name],
                    "array_index": None if ia < 0 else {"column": int(ia), "row": int(ib)},
                    "transform": {"x_um": um(t.disp.x * dbu), "y_um": um(t.disp.y * dbu),
                                  "rotation_deg": um(t.angle), "mirror": bool(t.is_mirror()),
                                  "magnification": um(t.mag)},
                    "bbox_um": box_um(bb, dbu), "bbox_dbu": box_dbu(bb)})
    return out, len(rows)


def _top_instances(session: Session, frame: kdb.Cell, box: kdb.Box, max_instances: int
                   ) -> tuple[list[dict[str, Any]], int]:
    """Direct instance records of the cell (an array is one record) touching the box."""
    layout = session.layout
    dbu = layout.dbu
    rows = []
    for inst in frame.each_touching_inst(box):
        bb = inst.bbox()
        t = inst.cplx_trans
        rows.append((bb.left, bb.bottom, bb.right, bb.top, inst.cell.name, str(t), inst))
    rows.sort(key=lambda r: r[:6])
    out = []
    for (_l, _b, _r, _t, name, _ts, inst) in rows[:max_instances]:
        bb = inst.bbox()
        t = inst.cplx_trans
        arr = None
        if inst.is_regular_array():
            arr = {"columns": int(inst.na), "rows": int(inst.nb),
                   "column_step_um": {"x": um(inst.da.x), "y": um(inst.da.y)},
                   "row_step_um": {"x": um(inst.db.x), "y": um(inst.db.y)}, "count": int(inst.size())}
        out.append({"child_cell": name, "parent_cell": frame.name, "instance_path": [frame.name, name],
                    "array_index": None, "array": arr,
                    "transform": {"x_um": um(t.disp.x * dbu), "y_um": um(t.disp.y * dbu),
                                  "rotation_deg": um(t.angle), "mirror": bool(t.is_mirror()),
                                  "magnification": um(t.mag)},
                    "bbox_um": box_um(bb, dbu), "bbox_dbu": box_dbu(bb)})
    return out, len(rows)
