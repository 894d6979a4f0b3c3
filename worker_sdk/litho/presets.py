"""Named optimize recipes: a preset fills in request keys the caller left out.

`mrc-quality` is the recipe for masks a mask shop accepts: the minimum width,
space and area of registry/mask_rules.py, the bridge term on, and nothing cleared
inside the clip canvas except a frame along its edge (`halo_nm` 2048). The
assist material the ILT places 256-768 nm from the pattern sharpens the print;
clearing it (the old 256 nm halo) cost about 10% of L2 on the ICCAD 2013
clips. Its loss weights spend some of the PV band on nominal L2 (see
docs/benchmarks-history.md, "Mask-rule-clean ILT").

Keys the request gives win over the preset's; `mrc` is merged key by key.
"""
from __future__ import annotations

from typing import Any, Mapping

from registry import mask_rules

from .errors import BadRequest

PRESETS: dict[str, dict[str, Any]] = {
    "mrc-quality": {
        "bridge_weight": 4.0,
        "pvb_weight": 0.15,
        "band_weight": 2.0,
        "mrc": {**mask_rules.mrc_request(), "halo_nm": 2048},
    },
}


def apply_preset(request: Mapping[str, Any]) -> dict[str, Any]:
    """The request with its preset's defaults filled in (a copy; unchanged without `preset`)."""
    out = dict(request)
    name = out.get("preset")
    if name is None:
        return out
    if name not in PRESETS:
        raise BadRequest(f"unknown preset {name!r} (known: {', '.join(sorted(PRESETS))})",
                         code="LITHO_UNKNOWN_PRESET", details={"preset": name})
    for key, value in PRESETS[name].items():
        if key == "mrc":
            out["mrc"] = {**value, **dict(out.get("mrc") or {})}
        elif key not in out:
            out[key] = value
    return out
