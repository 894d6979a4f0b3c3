"""Deterministic rounding: microns to 6 decimals, dbu as integers."""
from __future__ import annotations

import math

import klayout.db as kdb


def um(value: float) -> float:
    r = round(float(value), 6)
    return 0.0 if r == 0 else r


def box_um(box: kdb.Box, dbu: float) -> dict[str, float]:
    return {"left": um(box.left * dbu), "bottom": um(box.bottom * dbu),
            "right": um(box.right * dbu), "top": um(box.top * dbu)}


def box_dbu(box: kdb.Box) -> dict[str, int]:
    return {"left": int(box.left), "bottom": int(box.bottom), "right": int(box.right), "top": int(box.top)}


def finite(*values: float) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)
