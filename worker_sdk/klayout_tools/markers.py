"""Read DRC markers from a .lyrdb report and express them as litho violations[].

Markers are sorted by rule, then box (left, bottom, right, top), then cell.
Violations follow specs/litho-mcp-bridge-rfc.md section 2: rule_id is the
report category, coordinate_frame input_layout_native (marker coordinates are
those of the session layout, which the deck ran on unchanged), deterministic
ids derived from the deck hash, rule and location (dedup radius 0: markers
with the same rule and centre share a group; the first is canonical).
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import klayout.db as kdb
import klayout.rdb as krdb

from .errors import DrcRunFailed
from .units import box_dbu, box_um

VIOLATIONS_SCHEMA_VERSION = "1.0.0"


def _value_bbox(value: krdb.RdbItemValue) -> kdb.DBox | None:
    for test, getter in (("is_box", "box"), ("is_polygon", "polygon"), ("is_edge_pair", "edge_pair"),
                         ("is_edge", "edge"), ("is_path", "path"), ("is_text", "text")):
        if getattr(value, test)():
            return getattr(value, getter)().bbox()
    return None


def _category_name(cat: krdb.RdbCategory | None) -> str:
    """The category's name, sub-categories joined with '/' (unquoted, unlike RdbCategory.path)."""
    parts = []
    while cat is not None:
        parts.insert(0, cat.name())
        cat = cat.parent()
    return "/".join(parts) or "unknown"


def read_report(path: Path, dbu: float) -> tuple[list[dict[str, Any]], dict[str, int]]:
    db = krdb.ReportDatabase("")
    try:
        db.load(str(path))
    except RuntimeError as exc:
        raise DrcRunFailed("the DRC report could not be read", details={"report": str(path),
                                                                        "error": str(exc)}) from exc
    rule_counts: dict[str, int] = {}
    markers = []
    for item in db.each_item():
        cat = db.category_by_id(item.category_id())
        rule = _category_name(cat)
        rule_counts[rule] = rule_counts.get(rule, 0) + 1
        cell = db.cell_by_id(item.cell_id())
        bbox = kdb.DBox()
        for value in item.each_value():
            vb = _value_bbox(value)
            if vb is not None:
                bbox += vb
        if bbox.empty():
            continue
        ibox = kdb.Box(int(round(bbox.left / dbu)), int(round(bbox.bottom / dbu)),
                       int(round(bbox.right / dbu)), int(round(bbox.top / dbu)))
        markers.append({"rule": rule, "box_um": box_um(ibox, dbu), "box_dbu": box_dbu(ibox),
                        "cell": cell.name() if cell is not None else ""})
    markers.sort(key=lambda m: (m["rule"], m["box_dbu"]["left"], m["box_dbu"]["bottom"], m["box_dbu"]["right"],
                                m["box_dbu"]["top"], m["cell"]))
    return markers, dict(sorted(rule_counts.items()))


def _h16(*parts: bytes) -> str:
    return hashlib.blake2b(b"".join(parts), digest_size=8).hexdigest()


def violations(markers: list[dict[str, Any]], *, deck_name: str, deck_sha256: str, run_id: str,
               dbu: float) -> list[dict[str, Any]]:
    deck_hash = f"sha256:{deck_sha256}"
    radius_pm = 0
    seen: dict[str, int] = {}
    out = []
    for m in markers:
        b = m["box_dbu"]
        cx2, cy2 = b["left"] + b["right"], b["bottom"] + b["top"]  # twice the centre, in dbu (exact)
        x_pm = int(round(cx2 * dbu * 500_000))
        y_pm = int(round(cy2 * dbu * 500_000))
        group = _h16(deck_hash.encode(), radius_pm.to_bytes(8, "big", signed=True),
                     x_pm.to_bytes(16, "big", signed=True), y_pm.to_bytes(16, "big", signed=True),
                     m["rule"].encode())
        ordinal = seen.get(group, 0)
        seen[group] = ordinal + 1
        box_key = f"{b['left']},{b['bottom']},{b['right']},{b['top']}:{m['cell']}:{ordinal}".encode()
        out.append({
            "violation_id": "v" + _h16(group.encode(), box_key),
            "violation_group_id": group,
            "rule_id": m["rule"],
            "rule_deck": deck_name,
            "severity": "error",
            "coordinate_frame": "input_layout_native",
            "location_nm": [round(x_pm / 1000.0, 3), round(y_pm / 1000.0, 3)],
            "transforms": [],
            "context": {"run_id": run_id, "cell": m["cell"], "box_um": m["box_um"], "box_dbu": m["box_dbu"]},
            "dedup_strategy": "canonical" if ordinal == 0 else "shadow",
            "dedup_provenance": {"rule_deck_hash": deck_hash, "radius_nm": 0.0, "rule_id": m["rule"]},
        })
    return out
