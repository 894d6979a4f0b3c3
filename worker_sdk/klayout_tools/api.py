"""The KLayout observer and DRC tools: one plain function per contract tool.

Each takes the request dict (validated against
registry/schemas/klayout/<tool>.request.json) and returns the response dict
(shaped by <tool>.response.json), or raises a KlayoutToolError whose code is
the contract's. Sessions live in an in-process SessionStore; every call first
expires idle sessions (lazy TTL). Long calls hold the GIL: serve these from a
worker process, not from an event loop.
"""
from __future__ import annotations

import functools
import json
import shutil
from typing import Any, Callable

import klayout.db as kdb

from registry import schema_store
from registry.errors import SchemaValidationError
from registry.input_codes import klayout_input_code

from . import drc, inspect_cells, loader, measure as measure_mod, query, render
from .errors import (InternalError, InvalidBox, InvalidTarget, KlayoutToolError, SessionExpired, SessionNotFound,
                     ToolLimitExceeded)
from .layers import layer_ref, resolve_layers
from registry.pathpolicy import PathPolicyError

from .paths import resolve_allowed
from .sessions import Session, SessionStore
from .units import box_dbu, box_um, um

TOOL_NAMES = ("open_layout", "close_session", "list_cells", "describe_cell", "list_layers", "query_region",
              "measure_geometry", "analyze_waveguide", "set_view", "render_view", "run_drc_script",
              "extract_markers")

_DEFAULT_STORE = SessionStore()


def default_store() -> SessionStore:
    return _DEFAULT_STORE


def _validate(tool: str, request: Any) -> None:
    if not isinstance(request, dict):
        raise InvalidTarget("request must be a JSON object", details={"tool": tool})
    try:
        schema_store.validate(f"klayout/{tool}.request", request)
    except SchemaValidationError as exc:
        errors = exc.details.get("errors", [])
        code = klayout_input_code([e["path"] for e in errors])
        raise KlayoutToolError(f"invalid {tool} request: {exc.message}", code=code,
                               details={"tool": tool, "errors": errors}, hints=exc.hints) from exc


def tool(fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(request: dict[str, Any], *, store: SessionStore | None = None) -> dict[str, Any]:
        _validate(name, request)
        st = store or _DEFAULT_STORE
        try:
            with st.in_use(request.get("session_id")):  # idle time counts from the end of this call
                return fn(request, st)
        except (KlayoutToolError, PathPolicyError):
            raise
        except Exception as exc:  # a bug or an unexpected KLayout failure: typed, never a bare traceback
            raise InternalError(f"{name} failed unexpectedly",
                                details={"tool": name, "error": type(exc).__name__}) from exc

    wrapper.tool_name = name  # type: ignore[attr-defined]
    return wrapper


def _session(store: SessionStore, request: dict[str, Any]) -> Session:
    return store.get(request["session_id"])


@tool
def open_layout(request: dict[str, Any], store: SessionStore) -> dict[str, Any]:
    store.sweep()
    cfg = store.config
    source, layout, top, tops = loader.load(request["path"], request.get("format"), request.get("top_cell"), cfg)
    session = store.create(source=source, layout=layout, top_cell=top, top_cells=tops)
    bbox = layout.cell(top).bbox()
    return {"session_id": session.id, "source": source, "selected_top_cell": top, "top_cells": tops,
            "dbu": layout.dbu, "bbox_um": box_um(bbox, layout.dbu), "bbox_dbu": box_dbu(bbox),
            "layer_count": len(layout.layer_indexes()), "artifact_root": str(session.artifact_dir)}


@tool
def close_session(request: dict[str, Any], store: SessionStore) -> dict[str, Any]:
    closed, deleted = store.close(request["session_id"])
    return {"session_id": request["session_id"], "closed": closed, "artifact_dir_deleted": deleted}


@tool
def list_cells(request: dict[str, Any], store: SessionStore) -> dict[str, Any]:
    s = _session(store, request)
    with s.lock:
        return inspect_cells.list_cells(s, request.get("max_depth"), store.config.limits.max_cells_per_response)


@tool
def describe_cell(request: dict[str, Any], store: SessionStore) -> dict[str, Any]:
    s = _session(store, request)
    lim = store.config.limits
    depth = min(request.get("depth", 1), lim.max_describe_depth)
    with s.lock:
        return inspect_cells.describe_cell(s, request["cell"], depth, lim.max_instances_per_response,
                                           lim.max_labels_per_response)


@tool
def list_layers(request: dict[str, Any], store: SessionStore) -> dict[str, Any]:
    s = _session(store, request)
    with s.lock:
        return inspect_cells.list_layers(s)


@tool
def query_region(request: dict[str, Any], store: SessionStore) -> dict[str, Any]:
    s = _session(store, request)
    lim = store.config.limits
    with s.lock:
        s.id_limit = lim.max_ids_per_session
        return query.query_region(s, request, max_shapes_cap=lim.max_shapes_per_response,
                                  max_instances_cap=lim.max_instances_per_response, scan_limit=lim.query_scan_limit)


@tool
def measure_geometry(request: dict[str, Any], store: SessionStore) -> dict[str, Any]:
    s = _session(store, request)
    with s.lock:
        return measure_mod.measure(s, request["mode"], list(request["target_ids"]),
                                   store.config.limits.max_measure_edge_pairs)


@tool
def analyze_waveguide(request: dict[str, Any], store: SessionStore) -> dict[str, Any]:
    s = _session(store, request)
    with s.lock:
        return measure_mod.analyze_waveguide(s, request["target_id"])


def _view_spec(s: Session, request: dict[str, Any]) -> tuple[str, Any, list[int]]:
    """Cell, dbu box and layer indexes: the request's fields, else the stored view, else the whole top cell."""
    state = s.view_state or {}
    cell_name = request.get("cell", state.get("cell", s.top_cell))
    cell = loader.cell_or_error(s.layout, cell_name)
    if "box" in request:
        box = query.box_from_request(request["box"], s.dbu)
    elif "box_dbu" in state and state.get("cell") == cell_name:
        b = state["box_dbu"]
        box = kdb.Box(b["left"], b["bottom"], b["right"], b["top"])
    else:
        box = cell.bbox()
        if box.empty() or box.width() == 0 or box.height() == 0:
            box = kdb.Box(-1000, -1000, 1000, 1000) if box.empty() else box.enlarged(1, 1)
    layers = request.get("layers", state.get("layers"))
    return cell_name, box, resolve_layers(s.layout, layers)


@tool
def set_view(request: dict[str, Any], store: SessionStore) -> dict[str, Any]:
    s = _session(store, request)
    with s.lock:
        cell, box, layer_indexes = _view_spec(s, request)
        refs = [layer_ref(s.layout, li) for li in layer_indexes]
        s.view_state = {"cell": cell, "box_dbu": box_dbu(box), "box_um": box_um(box, s.dbu),
                        "layers": [{"layer": r["layer"], "datatype": r["datatype"]} for r in refs]
                        if "layers" in request or (s.view_state or {}).get("layers") is not None else None}
        s.write_manifest()
        return {"session_id": s.id, "view": {"cell": cell, "box_um": box_um(box, s.dbu), "layers": refs}}


@tool
def render_view(request: dict[str, Any], store: SessionStore) -> dict[str, Any]:
    s = _session(store, request)
    size = request.get("image_size", render.DEFAULT_SIZE)
    style = request.get("style", "light")
    render.check_size(size["width"], size["height"], store.config.limits)
    with s.lock:
        cell, box, layer_indexes = _view_spec(s, request)
        outlines = render.outlines_for(s, request.get("annotations", []), cell)
        spec = {"cell": cell, "box_dbu": box_dbu(box), "layers": [layer_ref(s.layout, li) for li in layer_indexes],
                "width": size["width"], "height": size["height"], "style": style,
                "annotations": request.get("annotations", [])}
        rid = render.render_id(s, spec)
        out = s.artifact_dir / "renders" / f"{rid}.png"
        render.render_png(s, cell=cell, box=box, layer_indexes=layer_indexes, width=size["width"],
                          height=size["height"], style=style, outlines=outlines, out_path=out)
        return {"session_id": s.id, "render_id": rid, "box_um": box_um(box, s.dbu),
                "image": {"kind": "render", "path": str(out), "media_type": "image/png"},
                "width": size["width"], "height": size["height"], "style": style}


@tool
def run_drc_script(request: dict[str, Any], store: SessionStore) -> dict[str, Any]:
    s = _session(store, request)
    cfg = store.config
    script = resolve_allowed(request["script_path"], cfg.deck_roots or cfg.allowed_roots, field="script_path")
    script_type = drc.check_deck(script, request.get("script_type"))
    with s.lock:
        record, rc, rule_counts, duration = drc.run_deck(s, script, script_type, dict(request.get("params", {})),
                                                         cfg)
        s.write_manifest()
    return {"session_id": s.id, "run_id": record.run_id, "script_path": request["script_path"],
            "resolved_script_path": str(script), "script_type": script_type, "return_code": rc,
            "marker_count": sum(rule_counts.values()), "rule_counts": rule_counts,
            "artifacts": drc.run_artifacts(record), "duration_s": round(duration, 6)}


@tool
def extract_markers(request: dict[str, Any], store: SessionStore) -> dict[str, Any]:
    s = _session(store, request)
    lim = store.config.limits
    with s.lock:
        record = s.runs.get(request["run_id"])
        if record is None:
            raise InvalidTarget(f"no DRC run {request['run_id']!r} in this session",
                                details={"run_id": request["run_id"], "runs": sorted(s.runs)})
        markers = record.markers[:lim.max_markers_per_response]
        include = request.get("include_crops", False)
        crop = request.get("crop_size_um", {"x": 20.0, "y": 20.0})
        if include:
            if not (0 < crop["x"] <= lim.max_crop_side_um and 0 < crop["y"] <= lim.max_crop_side_um):
                raise InvalidBox("crop_size_um must be positive and at most the crop limit",
                                 details={"crop_size_um": crop, "max_um": lim.max_crop_side_um})
            if len(markers) > lim.max_crops:
                raise ToolLimitExceeded("too many markers to crop", details={
                    "limit": "max_crops", "max": lim.max_crops, "markers": len(markers)},
                    hints=["call with include_crops false, or raise KLAYOUT_MCP_MAX_CROPS"])
        viol = record.violations
        out = []
        dbu = s.dbu
        layer_indexes = resolve_layers(s.layout, None)
        for n, m in enumerate(markers, start=1):
            item = {"rule": m["rule"], "box_um": m["box_um"], "box_dbu": m["box_dbu"], "cell": m["cell"]}
            if include:
                b = m["box_dbu"]
                cx, cy = (b["left"] + b["right"]) / 2.0, (b["bottom"] + b["top"]) / 2.0
                hx, hy = crop["x"] / dbu / 2.0, crop["y"] / dbu / 2.0
                cbox = kdb.Box(int(round(cx - hx)), int(round(cy - hy)), int(round(cx + hx)),
                                     int(round(cy + hy)))
                path = record.run_dir / "crops" / f"marker_{n:04d}.png"
                mbox = kdb.DBox(b["left"] * dbu, b["bottom"] * dbu, b["right"] * dbu, b["top"] * dbu)
                cell = m["cell"] if s.layout.has_cell(m["cell"]) else s.top_cell
                render.render_png(s, cell=cell, box=cbox, layer_indexes=layer_indexes, width=256, height=256,
                                  style="light", outlines=[(mbox, 0xFF3B30)], out_path=path)
                item["crop"] = {"kind": "render", "path": str(path), "media_type": "image/png"}
                item["crop_box_um"] = box_um(cbox, dbu)
            out.append(item)
        return {"session_id": s.id, "run_id": record.run_id, "markers": out, "marker_count": len(record.markers),
                "violations_schema_version": "1.0.0", "violations": viol[:lim.max_markers_per_response],
                "truncation": {"markers_dropped": len(record.markers) - len(markers)}}


def restore_session(request: dict[str, Any], *, store: SessionStore | None = None) -> dict[str, Any]:
    """Re-create a session under its own id in a fresh worker (host-only; not a contract tool).

    request: {session_id, open: open_layout request, sha256, idle_s, queries: [query_region requests]}.
    The session comes back whole or not at all: the same layout bytes (sha256), the same artifact
    folder, its DRC runs and view read back from that folder, its shape ids rebuilt by replaying its
    queries in order (ids are content-derived, so the replay yields the same ids). A session idle for
    longer than the TTL is expired here (folder deleted), exactly as the lost worker would have done.
    """
    st = store or _DEFAULT_STORE
    cfg = st.config
    sid = request["session_id"]
    root = cfg.artifact_root if cfg.artifact_root.is_absolute() else cfg.artifact_root.resolve()
    folder = root / "sessions" / sid
    if float(request.get("idle_s", 0.0)) > cfg.ttl_seconds:
        shutil.rmtree(folder, ignore_errors=True)
        raise SessionExpired("session expired after inactivity", details={"session_id": sid,
                             "ttl_seconds": cfg.ttl_seconds}, hints=["open_layout again"])
    if not (folder / "session.json").is_file():
        raise SessionNotFound("the session's artifact folder is gone", details={"session_id": sid},
                              hints=["open_layout again"])
    manifest = json.loads((folder / "session.json").read_text())
    opener = request["open"]
    source, layout, top, tops = loader.load(opener["path"], opener.get("format"), opener.get("top_cell"), cfg)
    if source["sha256"] != request.get("sha256"):
        raise SessionNotFound("the layout changed since the session was opened",
                              details={"session_id": sid, "reason": "source_changed"}, hints=["open_layout again"])
    session = st.create(source=source, layout=layout, top_cell=top, top_cells=tops, session_id=sid)
    try:
        session.view_state = manifest.get("view")
        for run_id in manifest.get("runs", []):
            session.runs[run_id] = drc.load_run(session, run_id)
        session.write_manifest()
        for q in request.get("queries", []):
            query_region({**q, "session_id": sid}, store=st)
    except BaseException:
        st.forget(sid)  # never half-alive: drop it, keep the folder for a later attempt
        raise
    return {"session_id": sid, "shape_ids": len(session.shapes), "runs": sorted(session.runs),
            "artifact_root": str(session.artifact_dir)}


TOOLS: dict[str, Callable[..., dict[str, Any]]] = {name: globals()[name] for name in TOOL_NAMES}

__all__ = [*TOOL_NAMES, "TOOLS", "default_store", "um"]
