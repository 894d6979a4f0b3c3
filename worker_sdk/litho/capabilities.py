"""The capabilities matrix of RFC 0006 §3, as data (served on tools/list by the MCP front door)."""
from __future__ import annotations

from typing import Any

from .violations import SCHEMA_VERSION

LAYOUT_AREA_NM2_MAX = 5.0e10
VIOLATION_COUNT_MAX = 50_000
MAX_VIOLATIONS_PER_RESPONSE = 10_000


def capabilities() -> dict[str, Any]:
    conditional = {
        "detailed": "conditional",
        "precondition": {
            "layout_area_nm2_max": LAYOUT_AREA_NM2_MAX,
            "violation_count_max": VIOLATION_COUNT_MAX,
            "on_exceeded": "degrade_to_aggregate",
            "signaled_via": "degraded_to_aggregate: true on response",
        },
    }
    return {
        "schema_version": SCHEMA_VERSION,
        "engine": "dome.litho",
        "engine_paths": {
            # L2 and EPE records fall out of the nominal print the aggregate already computes.
            "litho.l2": {"detailed": "single_pass"},
            "litho.epe": {"detailed": "single_pass"},
            # PVB regions come from the max/min prints, also already computed.
            "litho.pvb": {"detailed": "single_pass"},
            # Topology records (bridges, opens, extra, missing) compare the corner prints with the target.
            "litho.topology": {"detailed": "single_pass"},
            # Tiled layouts: detailed output below the precondition, aggregate above it.
            "litho.tiled": conditional,
            # Aerial-image contours per violation are not produced by the engine.
            "litho.aerial_contours": {"detailed": "unsupported"},
        },
        "report_levels": ["aggregate", "detailed"],
        "max_violations_per_response": MAX_VIOLATIONS_PER_RESPONSE,
    }
