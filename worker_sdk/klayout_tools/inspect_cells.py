"""list_cells, describe_cell and list_layers: hierarchy and per-layer summaries."""
from __future__ import annotations

from functools import lru_cache
from typing import Any

import klayout.db as kdb

from .layers import layer_ref, sorted_layer_indexes
from .loader import cell_or_error
from .sessions import Session
from .units import box_dbu, box_um, um


def _own_shape_count(cell: kdb.Cell, layout: kdb.Layout) -> int:
    return sum(cell.shapes(li).size() for li in layout.layer_indexes())


def list_cells(session: Session, max_depth: int | None, max_cells: int) -> dict[str, Any]:
    layout = session.layout
    level: dict[int, int] = {}
    frontier = [c.cell_index() for c in layout.top_cells()]
    for ci in frontier:
        level[ci] = 0
    depth = 0
    while frontier and (max_depth is None or depth < max_depth):
        depth += 1
        nxt = []
        for ci in frontier:
            for child in layout.cell(ci).each_child_cell():
                if child not in level:
                    level[child] = depth
                    nxt.append(child)
        frontier = nxt
    cells = sorted((layout.cell(ci) for ci in level), key=lambda c: c.name)
    dbu = layout.dbu
    out = []
    for cell in cells[:max_cells]:
        bbox = cell.bbox()
        out.append({"name": cell.name, "is_top": cell.is_top(), "bbox_um": box_um(bbox, dbu),
                    "bbox_dbu": box_dbu(bbox), "child_instance_count": int(cell.child_instances()),
                    "shape_count": _own_shape_count(cell, layout), "depth": level[cell.cell_index()]})
    return {"session_id": session.id, "cells": out,
            "truncation": {"cells_dropped": max(0, len(cells) - max_cells)}}


def _transform(inst: kdb.Instance) -> dict[str, Any]:
    t = inst.dcplx_trans
    return {"x_um": um(t.disp.x), "y_um": um(t.disp.y), "rotation_deg": um(t.angle),
            "mirror": bool(t.is_mirror()), "magnification": um(t.mag)}


def _array(inst: kdb.Instance) -> dict[str, Any] | None:
    if not inst.is_regular_array():
        return None
    return {"columns": int(inst.na), "rows": int(inst.nb),
            "column_step_um": {"x": um(inst.da.x), "y": um(inst.da.y)},
            "row_step_um": {"x": um(inst.db.x), "y": um(inst.db.y)},
            "count": int(inst.size())}


def _inst_key(inst: kdb.Instance) -> tuple:
    t = inst.cplx_trans
    return (inst.cell.name, t.disp.x, t.disp.y, t.angle, t.is_mirror(), t.mag, inst.na, inst.nb)


def _instances(cell: kdb.Cell, depth: int, budget: list[int], dbu: float) -> list[dict[str, Any]]:
    insts = sorted(cell.each_inst(), key=_inst_key)
    ordinal: dict[str, int] = {}
    out = []
    for inst in insts:
        if budget[0] <= 0:
            budget[1] += 1
            continue
        budget[0] -= 1
        child = inst.cell
        k = ordinal.get(child.name, 0)
        ordinal[child.name] = k + 1
        bbox = inst.bbox()
        item = {"name": f"{child.name}#{k}", "child_cell": child.name, "array": _array(inst),
                "transform": _transform(inst), "bbox_um": box_um(bbox, dbu), "bbox_dbu": box_dbu(bbox)}
        if depth > 1:
            item["children"] = _instances(child, depth - 1, budget, dbu)
        out.append(item)
    return out


def describe_cell(session: Session, name: str, depth: int, max_instances: int, max_labels: int) -> dict[str, Any]:
    layout = session.layout
    cell = cell_or_error(layout, name)
    dbu = layout.dbu
    budget = [max_instances, 0]
    instances = _instances(cell, depth, budget, dbu)

    @lru_cache(maxsize=None)
    def counts(ci: int, d: int) -> tuple[int, ...]:
        c = layout.cell(ci)
        own = [c.shapes(li).size() for li in order]
        if d > 0:
            for inst in c.each_inst():
                sub = counts(inst.cell_index, d - 1)
                n = inst.size()
                own = [a + n * b for a, b in zip(own, sub)]
        return tuple(own)

    order = sorted_layer_indexes(layout)
    totals = counts(cell.cell_index(), depth)
    per_layer = [{**layer_ref(layout, li), "shape_count": int(n)} for li, n in zip(order, totals) if n]

    labels: list[dict[str, Any]] = []
    label_total = 0
    for li in order:
        it = cell.begin_shapes_rec(li)
        it.max_depth = depth
        it.shape_flags = kdb.Shapes.STexts
        while not it.at_end():
            label_total += 1
            text = it.shape().text.transformed(it.trans())
            labels.append({"text": text.string, "layer": layer_ref(layout, li),
                           "position_um": {"x": um(text.x * dbu), "y": um(text.y * dbu)},
                           "position_dbu": {"x": int(text.x), "y": int(text.y)},
                           "cell": layout.cell(it.cell_index()).name})
            it.next()
    labels.sort(key=lambda t: (t["layer"]["layer"], t["layer"]["datatype"], t["position_dbu"]["x"],
                               t["position_dbu"]["y"], t["text"], t["cell"]))
    bbox = cell.bbox()
    return {"session_id": session.id, "cell": cell.name, "bbox_um": box_um(bbox, dbu), "bbox_dbu": box_dbu(bbox),
            "instances": instances, "labels": labels[:max_labels], "shape_counts_by_layer": per_layer,
            "depth_used": depth,
            "truncation": {"instances_dropped": budget[1], "labels_dropped": max(0, label_total - max_labels)}}


def list_layers(session: Session) -> dict[str, Any]:
    layout = session.layout
    visible_keys = None
    if session.view_state is not None and session.view_state.get("layers") is not None:
        visible_keys = {(r["layer"], r["datatype"]) for r in session.view_state["layers"]}
    out = []
    for li in sorted_layer_indexes(layout):
        ref = layer_ref(layout, li)
        count = sum(c.shapes(li).size() for c in layout.each_cell())
        visible = visible_keys is None or (ref["layer"], ref["datatype"]) in visible_keys
        out.append({**ref, "visible": visible, "shape_count": int(count)})
    return {"session_id": session.id, "layers": out}


