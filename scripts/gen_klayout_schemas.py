"""Write registry/schemas/klayout/*.json (the KLayout observer contract as JSON Schema).

The schemas are the source of truth and are committed; this script is how they
were written and is kept so a contract change is one edit here plus a re-run.
Requests are closed (additionalProperties false), responses open.
"""
from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "registry" / "schemas" / "klayout"
BASE = "https://dome.dev/schemas/klayout/"
C = "common.json#/$defs/"


def ref(name: str) -> dict:
    return {"$ref": C + name}


NUM = {"type": "number"}
INT = {"type": "integer"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
SID = ref("SessionId")

COMMON = {
    "$defs": {
        "SessionId": {"type": "string", "minLength": 1, "maxLength": 64,
                      "description": "ses_<12 lowercase hex>, as returned by open_layout"},
        "MicronBox": {"type": "object", "required": ["left", "bottom", "right", "top"],
                      "properties": {k: NUM for k in ("left", "bottom", "right", "top")},
                      "additionalProperties": False},
        "MicronBoxOut": {"type": "object", "required": ["left", "bottom", "right", "top"],
                         "properties": {k: NUM for k in ("left", "bottom", "right", "top")}},
        "DbuBox": {"type": "object", "required": ["left", "bottom", "right", "top"],
                   "properties": {k: INT for k in ("left", "bottom", "right", "top")}},
        "LayerRefIn": {"type": "object", "required": ["layer", "datatype"],
                       "properties": {"layer": {"type": "integer", "minimum": 0, "maximum": 65535},
                                      "datatype": {"type": "integer", "minimum": 0, "maximum": 65535},
                                      "name": {"type": "string", "maxLength": 256}},
                       "additionalProperties": False},
        "LayerRef": {"type": "object", "required": ["layer", "datatype"],
                     "properties": {"layer": INT, "datatype": INT, "name": STR}},
        "LayerList": {"type": "array", "maxItems": 4096, "items": {"$ref": "#/$defs/LayerRefIn"}},
        "ArtifactRef": {"type": "object", "required": ["kind", "path", "media_type"],
                        "properties": {"kind": STR, "path": {"type": "string", "pattern": "^/"},
                                       "media_type": STR}},
        "ShapeRef": {"type": "object",
                     "required": ["id", "kind", "cell", "instance_path", "layer", "bbox_um"],
                     "properties": {"id": {"type": "string", "pattern": "^shp_[0-9a-f]{8,}$"},
                                    "kind": {"enum": ["box", "polygon", "path", "text", "edge", "point"]},
                                    "cell": STR,
                                    "instance_path": {"type": "array", "items": STR},
                                    "layer": {"$ref": "#/$defs/LayerRef"},
                                    "bbox_um": {"$ref": "#/$defs/MicronBoxOut"},
                                    "bbox_dbu": {"$ref": "#/$defs/DbuBox"}}},
        "Truncation": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
    }
}


def req(required: list[str], props: dict, title: str, desc: str) -> dict:
    return {"title": title, "description": desc, "type": "object", "required": required,
            "properties": props, "additionalProperties": False}


def resp(required: list[str], props: dict, title: str, desc: str) -> dict:
    return {"title": title, "description": desc, "type": "object", "required": required,
            "properties": props}


TOOLS: dict[str, tuple[dict, dict]] = {}

TOOLS["open_layout"] = (
    req(["path"], {"path": {"type": "string", "minLength": 1, "maxLength": 4096},
                   "top_cell": {"type": "string", "minLength": 1, "maxLength": 1024},
                   "format": {"type": "string", "maxLength": 16,
                              "description": "gds, gdsii, oas or oasis; inferred from the extension when omitted"}},
        "open_layout request", "Open a GDS or OASIS layout read-only and create a session."),
    resp(["session_id", "source", "selected_top_cell", "top_cells", "dbu", "bbox_um", "bbox_dbu",
          "layer_count", "artifact_root"],
         {"session_id": STR,
          "source": {"type": "object", "required": ["path", "format", "sha256"],
                     "properties": {"path": STR, "format": {"enum": ["gds", "oas"]},
                                    "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}},
          "selected_top_cell": STR, "top_cells": {"type": "array", "items": STR},
          "dbu": NUM, "bbox_um": ref("MicronBoxOut"), "bbox_dbu": ref("DbuBox"),
          "layer_count": INT, "artifact_root": {"type": "string", "pattern": "^/"}},
         "open_layout response", "The new session and a summary of the layout."),
)

TOOLS["close_session"] = (
    req(["session_id"], {"session_id": SID}, "close_session request",
        "Close a session and delete its artifact directory."),
    resp(["session_id", "closed", "artifact_dir_deleted"],
         {"session_id": STR, "closed": BOOL, "artifact_dir_deleted": BOOL},
         "close_session response", "closed is false for an unknown or already closed session."),
)

TOOLS["list_cells"] = (
    req(["session_id"], {"session_id": SID, "max_depth": {"type": "integer", "minimum": 0, "maximum": 1000}},
        "list_cells request", "Cells reachable from the top cells within max_depth levels (top cells are level 0)."),
    resp(["session_id", "cells"],
         {"session_id": STR,
          "cells": {"type": "array", "items": {
              "type": "object",
              "required": ["name", "is_top", "bbox_um", "child_instance_count", "shape_count"],
              "properties": {"name": STR, "is_top": BOOL, "bbox_um": ref("MicronBoxOut"),
                             "bbox_dbu": ref("DbuBox"), "child_instance_count": INT,
                             "shape_count": INT, "depth": INT}}},
          "truncation": ref("Truncation")},
         "list_cells response", "Cells sorted by name."),
)

INSTANCE = {"type": "object", "required": ["name", "child_cell", "array", "transform", "bbox_um"],
            "properties": {"name": STR, "child_cell": STR,
                           "array": {"oneOf": [{"type": "null"}, {"type": "object"}]},
                           "transform": {"type": "object"}, "bbox_um": ref("MicronBoxOut"),
                           "children": {"type": "array"}}}

TOOLS["describe_cell"] = (
    req(["session_id", "cell"], {"session_id": SID, "cell": {"type": "string", "minLength": 1, "maxLength": 1024},
                                 "depth": {"type": "integer", "minimum": 0, "maximum": 1000}},
        "describe_cell request", "Instances, labels and per-layer shape counts of one cell."),
    resp(["cell", "bbox_um", "bbox_dbu", "instances", "labels", "shape_counts_by_layer", "depth_used"],
         {"session_id": STR, "cell": STR, "bbox_um": ref("MicronBoxOut"), "bbox_dbu": ref("DbuBox"),
          "instances": {"type": "array", "items": INSTANCE},
          "labels": {"type": "array", "items": {"type": "object", "required": ["text", "layer", "position_um"]}},
          "shape_counts_by_layer": {"type": "array", "items": {
              "type": "object", "required": ["layer", "datatype", "shape_count"]}},
          "depth_used": INT, "truncation": ref("Truncation")},
         "describe_cell response", "Instances are the cell's direct children (nested to depth_used)."),
)

TOOLS["list_layers"] = (
    req(["session_id"], {"session_id": SID}, "list_layers request", "Layers of the layout."),
    resp(["session_id", "layers"],
         {"session_id": STR, "layers": {"type": "array", "items": {
             "type": "object", "required": ["layer", "datatype", "visible", "shape_count"],
             "properties": {"layer": INT, "datatype": INT, "name": STR, "visible": BOOL, "shape_count": INT}}}},
         "list_layers response", "Layers sorted by layer, then datatype."),
)

TOOLS["query_region"] = (
    req(["session_id", "box"],
        {"session_id": SID, "box": ref("MicronBox"), "cell": {"type": "string", "minLength": 1, "maxLength": 1024},
         "layers": ref("LayerList"), "hierarchy_mode": {"enum": ["top", "recursive", "flattened"]},
         "max_shapes": {"type": "integer", "minimum": 0}, "max_instances": {"type": "integer", "minimum": 0}},
        "query_region request", "Shapes, instances and texts touching a box (microns, in the cell's frame)."),
    resp(["session_id", "box_um", "cell", "hierarchy_mode", "summary", "shapes", "instances", "texts", "truncation"],
         {"session_id": STR, "box_um": ref("MicronBoxOut"), "box_dbu": ref("DbuBox"), "cell": STR,
          "hierarchy_mode": {"enum": ["top", "recursive", "flattened"]},
          "summary": {"type": "object", "required": ["shape_count", "instance_count", "text_count"],
                      "properties": {"shape_count": INT, "instance_count": INT, "text_count": INT}},
          "shapes": {"type": "array", "items": ref("ShapeRef")},
          "instances": {"type": "array"}, "texts": {"type": "array", "items": ref("ShapeRef")},
          "truncation": {"type": "object", "required": ["shapes_dropped", "instances_dropped", "texts_dropped"],
                         "properties": {k: {"type": "integer", "minimum": 0}
                                        for k in ("shapes_dropped", "instances_dropped", "texts_dropped")}}},
         "query_region response", "Shapes sorted by layer, kind, then bbox; summary counts are before truncation."),
)

MODES = ["path_width", "segment_length", "centerline_distance", "edge_gap", "bend_radius_estimate",
         "overlap", "label_distance", "port_spacing"]
TOOLS["measure_geometry"] = (
    req(["session_id", "mode", "target_ids"],
        {"session_id": SID, "mode": {"enum": MODES},
         "target_ids": {"type": "array", "minItems": 1, "maxItems": 2,
                        "items": {"type": "string", "maxLength": 64}}},
        "measure_geometry request", "Measure previously queried shapes."),
    resp(["session_id", "mode", "target_ids", "value_um", "value_dbu", "details"],
         {"session_id": STR, "mode": {"enum": MODES}, "target_ids": {"type": "array", "items": STR},
          "value_um": {"type": ["number", "null"]}, "value_dbu": {"type": ["integer", "null"]},
          "details": {"type": "object", "required": ["method"]}},
         "measure_geometry response", "For overlap the values are areas (um^2 and dbu^2)."),
)

TOOLS["analyze_waveguide"] = (
    req(["session_id", "target_id"], {"session_id": SID, "target_id": {"type": "string", "maxLength": 64}},
        "analyze_waveguide request", "Analyze a previously queried path shape as a waveguide."),
    resp(["session_id", "target_id", "kind", "cell", "layer", "bbox_um", "center_um", "path_width_um",
          "segment_length_um", "bend_radius_estimate_um", "orientation", "is_path", "is_axis_aligned",
          "analysis_warnings"],
         {"session_id": STR, "target_id": STR, "kind": {"const": "path"}, "cell": STR, "layer": ref("LayerRef"),
          "bbox_um": ref("MicronBoxOut"),
          "center_um": {"type": "object", "required": ["x", "y"], "properties": {"x": NUM, "y": NUM}},
          "path_width_um": NUM, "segment_length_um": NUM, "bend_radius_estimate_um": {"type": ["number", "null"]},
          "orientation": {"enum": ["horizontal", "vertical", "diagonal", "mixed", "point"]},
          "is_path": BOOL, "is_axis_aligned": BOOL, "analysis_warnings": {"type": "array", "items": STR}},
         "analyze_waveguide response", "Path-backed waveguide geometry; no port or label inference."),
)

VIEW_REQ = {"session_id": SID, "box": ref("MicronBox"), "cell": {"type": "string", "minLength": 1, "maxLength": 1024},
            "layers": ref("LayerList")}
TOOLS["set_view"] = (
    req(["session_id"], VIEW_REQ, "set_view request",
        "Set the session's view (cell, box, visible layers); render_view uses it for omitted fields."),
    resp(["session_id", "view"],
         {"session_id": STR, "view": {"type": "object", "required": ["cell", "box_um", "layers"],
                                      "properties": {"cell": STR, "box_um": ref("MicronBoxOut"),
                                                     "layers": {"type": "array", "items": ref("LayerRef")}}}},
         "set_view response", "The view now stored in the session."),
)

TOOLS["render_view"] = (
    req(["session_id"],
        {**VIEW_REQ,
         "image_size": {"type": "object", "required": ["width", "height"],
                        "properties": {"width": {"type": "integer", "minimum": 1},
                                       "height": {"type": "integer", "minimum": 1}},
                        "additionalProperties": False},
         "annotations": {"type": "array", "maxItems": 256, "items": {
             "type": "object", "required": ["kind", "target_ids"],
             "properties": {"kind": {"enum": ["shape_outline"]},
                            "target_ids": {"type": "array", "maxItems": 1024,
                                           "items": {"type": "string", "maxLength": 64}},
                            "color": {"type": "string", "pattern": "^#[0-9a-fA-F]{6}$"}},
             "additionalProperties": False}},
         "style": {"enum": ["light", "dark", "mask"]}},
        "render_view request", "Render a PNG of the view; byte-stable for identical input and session state."),
    resp(["session_id", "render_id", "box_um", "image", "width", "height", "style"],
         {"session_id": STR, "render_id": {"type": "string", "pattern": "^rnd_[0-9a-f]{8}$"},
          "box_um": ref("MicronBoxOut"), "image": ref("ArtifactRef"), "width": INT, "height": INT,
          "style": {"enum": ["light", "dark", "mask"]}},
         "render_view response", "The PNG lies under the session's renders/ directory."),
)

TOOLS["run_drc_script"] = (
    req(["session_id", "script_path"],
        {"session_id": SID, "script_path": {"type": "string", "minLength": 1, "maxLength": 4096},
         "script_type": {"enum": ["ruby", "python"]},
         "params": {"type": "object", "maxProperties": 64,
                    "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]{0,63}$"},
                    "additionalProperties": {"type": "string", "maxLength": 4096}}},
        "run_drc_script request",
        "Run a DRC deck (Ruby via klayout -b -r, or Python on klayout.db) on a copy of the session layout."),
    resp(["session_id", "run_id", "script_path", "script_type", "return_code", "marker_count", "rule_counts",
          "artifacts"],
         {"session_id": STR, "run_id": {"type": "string", "pattern": "^drc_[0-9a-f]{8}$"}, "script_path": STR,
          "script_type": {"enum": ["ruby", "python"]}, "return_code": INT, "marker_count": INT,
          "rule_counts": {"type": "object", "additionalProperties": INT},
          "artifacts": {"type": "array", "items": ref("ArtifactRef"),
                        "contains": {"type": "object", "properties": {"kind": {"const": "drc_report"}}}},
          "duration_s": NUM},
         "run_drc_script response", "A drc_report artifact is always present on success."),
)

TOOLS["extract_markers"] = (
    req(["session_id", "run_id"],
        {"session_id": SID, "run_id": {"type": "string", "maxLength": 64}, "include_crops": BOOL,
         "crop_size_um": {"type": "object", "required": ["x", "y"],
                          "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                          "additionalProperties": False}},
        "extract_markers request", "Markers of a DRC run, optionally with a PNG crop around each."),
    resp(["session_id", "run_id", "markers"],
         {"session_id": STR, "run_id": STR,
          "markers": {"type": "array", "items": {
              "type": "object", "required": ["rule", "box_um"],
              "properties": {"rule": STR, "box_um": ref("MicronBoxOut"), "box_dbu": ref("DbuBox"),
                             "crop": ref("ArtifactRef"), "cell": STR}}},
          "violations": {"type": "array", "items": {"$ref": "violation.json"}},
          "truncation": ref("Truncation")},
         "extract_markers response", "Markers sorted by rule, then box; also as litho violations[] records."),
)

VIOLATION = {
    "title": "Violation",
    "description": "One DRC marker in the violations[] schema of the litho MCP bridge RFC (section 2).",
    "type": "object",
    "required": ["violation_id", "violation_group_id", "rule_id", "rule_deck", "severity", "coordinate_frame",
                 "location_nm", "transforms", "dedup_strategy", "dedup_provenance"],
    "properties": {
        "violation_id": {"type": "string", "pattern": "^v[0-9a-f]{16}$"},
        "violation_group_id": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
        "rule_id": STR, "rule_deck": STR, "severity": {"type": "string"},
        "coordinate_frame": {"type": "string",
                             "description": "input_layout_native, post_transform_canvas, tile_local, wafer_global; consumers must accept unknown values"},
        "location_nm": {"type": "array", "items": NUM, "minItems": 2, "maxItems": 2},
        "transforms": {"type": "array", "items": {"type": "object", "required": ["op"]}},
        "context": {"type": "object"},
        "dedup_strategy": {"enum": ["canonical", "shadow"]},
        "dedup_provenance": {"type": "object", "required": ["rule_deck_hash", "radius_nm", "rule_id"]},
    },
}


PARAMS = {"type": "object", "maxProperties": 64, "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]{0,63}$"},
          "additionalProperties": {"type": "string", "maxLength": 4096}}
REL = {"type": "string", "minLength": 1, "maxLength": 4096}
ACTION_COMMON = {"deck": {"type": "string", "minLength": 1, "maxLength": 4096,
                          "description": "builtin:mask_rules or a path relative to the checkout"},
                 "script_type": {"enum": ["ruby", "python"]}, "top_cell": {"type": "string", "minLength": 1},
                 "params": PARAMS}
ACTIONS = {
    "drc_run.action": {"title": "drc.run intent action",
                       "description": "Run a DRC deck on a layout in the scratch checkout.",
                       "type": "object", "required": ["deck", "layout"],
                       "properties": {"intent": {"const": "drc.run"}, **ACTION_COMMON, "layout": REL,
                                      "write_to": REL},
                       "additionalProperties": False},
    "drc_suite.action": {"title": "drc validation suite action",
                         "description": "Run a named deck on named layouts; passed iff zero markers.",
                         "type": "object", "required": ["deck", "layouts"],
                         "properties": {"suite": {"const": "drc"}, **ACTION_COMMON,
                                        "layouts": {"type": "array", "minItems": 1, "maxItems": 1000,
                                                    "items": REL}},
                         "additionalProperties": False},
}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    docs = {"common": {"title": "KLayout observer shared types", **COMMON},
            "violation": VIOLATION, **ACTIONS}
    for tool, (rq, rs) in TOOLS.items():
        docs[f"{tool}.request"] = rq
        docs[f"{tool}.response"] = rs
    for name, body in docs.items():
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": BASE + name + ".json", **body}
        (OUT / f"{name}.json").write_text(json.dumps(schema, indent=2) + "\n")


if __name__ == "__main__":
    main()
