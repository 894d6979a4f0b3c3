"""Helpers for the built-in mask-rule decks (minimum width, space, area on a layer).

The flagship ILT flow runs them on optimized masks:

    deck, params = mask_rule_deck("python", layer=1, min_width=0.06, min_space=0.06, min_area=0.01)
    api.run_drc_script({"session_id": sid, "script_path": str(deck), "script_type": "python", "params": params})
"""
from __future__ import annotations

from pathlib import Path

from .errors import InvalidTarget

DECK_DIR = Path(__file__).resolve().parent / "decks"
DECKS = {"ruby": DECK_DIR / "mask_rules.drc", "python": DECK_DIR / "mask_rules.py"}


def _fmt(value: float) -> str:
    return repr(float(value))


def mask_rule_deck(script_type: str = "python", *, layer: int = 1, datatype: int = 0, min_width: float,
                   min_space: float, min_area: float) -> tuple[Path, dict[str, str]]:
    """The deck path and its params for a mask-rule check; values in microns / square microns."""
    if script_type not in DECKS:
        raise InvalidTarget("script_type must be ruby or python", details={"script_type": script_type})
    for name, v in (("min_width", min_width), ("min_space", min_space), ("min_area", min_area)):
        if not v > 0:
            raise InvalidTarget(f"{name} must be positive", details={name: v})
    params = {"layer": str(int(layer)), "datatype": str(int(datatype)), "min_width": _fmt(min_width),
              "min_space": _fmt(min_space), "min_area": _fmt(min_area)}
    return DECKS[script_type], params
