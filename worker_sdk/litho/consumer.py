"""Consumer-side helpers for violation records (what a repair agent must do with them).

RFC 0006 §2a/§4: coordinate_frame is an open enum. A consumer must handle an
unknown value by refusing to act on the record, never by guessing a shift.
"""
from __future__ import annotations

from typing import Any, Iterable

KNOWN_FRAMES = ("post_transform_canvas", "input_layout_native", "tile_local")


def actionable(violation: dict[str, Any]) -> bool:
    """True when a repair agent may act on this record: canonical, in a frame it knows, with transforms."""
    frame = violation.get("coordinate_frame")
    match frame:
        case "post_transform_canvas" | "input_layout_native":
            pass
        case "tile_local":
            if "tile_origin_nm" not in violation.get("context", {}):
                return False
        case _:  # wafer_global (reserved) and any future value: reject, do not shift
            return False
    return violation.get("dedup_strategy") == "canonical" and isinstance(violation.get("transforms"), list)


def to_native(violation: dict[str, Any]) -> tuple[float, float] | None:
    """The record's location in the input layout's own frame, by undoing its transforms; None if unknown."""
    if not actionable(violation) and violation.get("dedup_strategy") == "canonical":
        return None
    x, y = violation["location_nm"]
    if violation["coordinate_frame"] == "input_layout_native":
        return float(x), float(y)
    for t in violation.get("transforms", []):
        if t.get("op") == "translate" and t.get("params", {}).get("from") == "input_layout_native":
            return float(x - t["params"]["dx"]), float(y - t["params"]["dy"])
    return None


def canonical_only(violations: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per violation_group_id: the canonical one (shadows are for traceability)."""
    return [v for v in violations if v.get("dedup_strategy") == "canonical"]
