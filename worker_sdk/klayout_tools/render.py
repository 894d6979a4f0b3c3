"""Deterministic PNG renders through klayout.lay.LayoutView.

Every render sets the whole view state explicitly (background, layer list,
colours, stipples, cell, box, hierarchy depth, markers), so the image depends
only on the request and the session's layout: identical input gives identical
bytes. The view is created by the session's first render and reused.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import klayout.db as kdb
import klayout.lay as klay

from .config import Limits
from .errors import InvalidTarget, RenderFailed, ToolLimitExceeded
from .layers import layer_ref
from .sessions import Session, ShapeRecord

PALETTE = (0x1F77B4, 0xD62728, 0x2CA02C, 0xFF7F0E, 0x9467BD, 0x8C564B, 0xE377C2, 0x7F7F7F,
           0xBCBD22, 0x17BECF, 0x393B79, 0xAD494A)
STYLES = {
    # background, text colour, dither pattern (KLayout stipple index), frame colour or None (= fill colour)
    "light": (0xFFFFFF, 0x000000, 5, None),
    "dark": (0x000000, 0xFFFFFF, 5, None),
    "mask": (0xFFFFFF, 0x000000, 0, 0x000000),
}
DEFAULT_SIZE = {"width": 1200, "height": 800}


def check_size(width: int, height: int, limits: Limits) -> None:
    if width > limits.max_image_side or height > limits.max_image_side or width * height > limits.max_image_pixels:
        raise ToolLimitExceeded("image_size is above the render limit",
                                details={"width": width, "height": height, "max_side": limits.max_image_side,
                                         "max_pixels": limits.max_image_pixels})


def render_id(session: Session, spec: dict[str, Any]) -> str:
    body = json.dumps({"source": session.source["sha256"], **spec}, sort_keys=True, separators=(",", ":"))
    return "rnd_" + hashlib.sha256(body.encode()).hexdigest()[:8]


def _view(session: Session) -> klay.LayoutView:
    if session.layout_view is None:
        view = klay.LayoutView()
        view.show_layout(session.layout, False)  # the view now owns the layout; the session keeps both
        session.layout_view = view
    return session.layout_view


def _shape_dgeometry(rec: ShapeRecord, dbu: float) -> Any:
    g = rec.geometry
    if rec.kind == "path":
        return g.polygon().to_dtype(dbu)
    if rec.kind == "text":
        return kdb.DBox(g.x * dbu, g.y * dbu, g.x * dbu, g.y * dbu)
    return g.to_dtype(dbu)


def _configure(view: klay.LayoutView, layout: kdb.Layout, cell: str, layer_indexes: list[int], style: str) -> None:
    """Set every piece of view state a render depends on (done again whenever any of it changes)."""
    bg, fg, dither, frame = STYLES[style]
    view.set_config("background-color", f"#{bg:06x}")
    view.set_config("grid-visible", "false")
    view.set_config("text-visible", "true")
    view.set_config("text-color", f"#{fg:06x}")
    view.set_config("default-text-size", "0.1")
    view.set_config("no-stipple", "false")
    view.set_config("markers-visible", "true")
    view.set_config("show-properties-as-text", "false")
    view.set_config("bitmap-oversampling", "1")
    cv = view.cellview(0)
    cv.cell_name = cell
    view.clear_layers()
    for ordinal, li in enumerate(layer_indexes):
        ref = layer_ref(layout, li)
        node = klay.LayerPropertiesNode()
        node.source = f"{ref['layer']}/{ref['datatype']}@1"
        colour = 0x000000 if style == "mask" else PALETTE[ordinal % len(PALETTE)]
        node.fill_color = colour
        node.frame_color = colour if frame is None else frame
        node.dither_pattern = dither
        node.width = 1
        node.visible = True
        node.transparent = False
        view.insert_layer(view.end_layers(), node)
    view.min_hier_levels = 0
    view.max_hier_levels = 1000


def render_png(session: Session, *, cell: str, box: kdb.Box, layer_indexes: list[int], width: int, height: int,
               style: str, outlines: list[tuple[Any, int]], out_path: Path) -> None:
    """outlines: (micron geometry, 0xRRGGBB) drawn as markers over the layout."""
    layout = session.layout
    dbu = layout.dbu
    try:
        view = _view(session)
        signature = (cell, tuple(layer_indexes), style)
        if session.render_signature != signature:
            session.render_signature = None  # a failure half-way leaves the state unknown
            _configure(view, layout, cell, layer_indexes, style)
            session.render_signature = signature
        markers = []
        for geom, colour in outlines:
            m = klay.Marker(view)
            m.set(geom)
            m.color = colour
            m.frame_color = colour
            m.line_width = 2
            m.vertex_size = 0
            m.dither_pattern = -1
            markers.append(m)
        target = kdb.DBox(box.left * dbu, box.bottom * dbu, box.right * dbu, box.top * dbu)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.tmp")
        view.save_image_with_options(str(tmp), width, height, 0, 1, 0, target, False)
        for m in markers:
            m._destroy()
        if not tmp.is_file() or tmp.stat().st_size == 0:
            raise RenderFailed("KLayout wrote no image", details={"path": str(out_path)})
        os.replace(tmp, out_path)
    except RenderFailed:
        raise
    except (RuntimeError, OSError) as exc:
        raise RenderFailed("rendering failed", details={"path": str(out_path), "error": str(exc)},
                           retry="light") from exc


def outlines_for(session: Session, annotations: list[dict[str, Any]], cell: str) -> list[tuple[Any, int]]:
    out = []
    for ann in annotations:
        colour = int(ann.get("color", "#ff3b30")[1:], 16)
        for tid in ann["target_ids"]:
            rec = session.shapes.get(tid)
            if rec is None:
                raise InvalidTarget(f"unknown annotation target {tid!r}", details={"target_id": tid})
            if rec.frame_cell != cell:
                raise InvalidTarget("annotation target was queried in another cell",
                                    details={"target_id": tid, "queried_in": rec.frame_cell, "render_cell": cell})
            out.append((_shape_dgeometry(rec, session.dbu), colour))
    return out
