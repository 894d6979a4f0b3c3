"""Runtime configuration of the KLayout tools, read from the environment.

KLAYOUT_MCP_ARTIFACT_ROOT (default <cwd>/.artifacts), KLAYOUT_MCP_SESSION_TTL_SECONDS
(default 3600), KLAYOUT_BIN (default "klayout"), KLAYOUT_MCP_ALLOWED_ROOTS (os.pathsep
separated absolute directories that layouts and decks may live under; default: the
current directory; dome's built-in decks are always allowed), KLAYOUT_MCP_DRC_TIMEOUT_SECONDS (default 600) and the limits
below (docs/klayout.md explains each). Behind the MCP host the roots come from the host's one path
policy (registry.pathpolicy, which reads KLAYOUT_MCP_ALLOWED_ROOTS too): layouts from its read roots,
decks from its deck roots only.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

BUILTIN_DECKS = Path(__file__).resolve().parent / "decks"  # dome's own decks may always run


def _num(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError:
        return default


@dataclass(frozen=True)
class Limits:
    max_sessions: int = 64
    max_layout_bytes: int = 2 * 1024**3
    max_shapes_per_response: int = 10_000
    max_instances_per_response: int = 10_000
    query_scan_limit: int = 5_000_000
    max_cells_per_response: int = 10_000
    max_labels_per_response: int = 1_000
    max_describe_depth: int = 8
    max_image_pixels: int = 4096 * 4096
    max_image_side: int = 8192
    max_measure_edge_pairs: int = 4_000_000
    max_markers_per_response: int = 10_000
    max_crops: int = 200
    max_ids_per_session: int = 1_000_000
    max_crop_side_um: float = 10_000.0


@dataclass(frozen=True)
class Config:
    artifact_root: Path
    ttl_seconds: float
    klayout_bin: str
    allowed_roots: tuple[Path, ...]
    drc_timeout_seconds: float
    limits: Limits = field(default_factory=Limits)
    deck_roots: tuple[Path, ...] = ()  # empty: the allowed roots (the tools used without the host)

    @classmethod
    def from_env(cls) -> "Config":
        root = os.environ.get("KLAYOUT_MCP_ARTIFACT_ROOT") or str(Path.cwd() / ".artifacts")
        roots_raw = os.environ.get("KLAYOUT_MCP_ALLOWED_ROOTS")
        roots = [r for r in (roots_raw.split(os.pathsep) if roots_raw else [str(Path.cwd())]) if r]
        limits = Limits(
            max_sessions=int(_num("KLAYOUT_MCP_MAX_SESSIONS", Limits.max_sessions)),
            query_scan_limit=int(_num("KLAYOUT_MCP_QUERY_SCAN_LIMIT", Limits.query_scan_limit)),
            max_crops=int(_num("KLAYOUT_MCP_MAX_CROPS", Limits.max_crops)),
            max_layout_bytes=int(_num("KLAYOUT_MCP_MAX_LAYOUT_BYTES", Limits.max_layout_bytes)),
        )
        from registry.pathpolicy import PathPolicy

        policy = PathPolicy.from_env()
        allowed = tuple(Path(r) for r in roots) if policy is None else policy.read_roots
        return cls(
            artifact_root=Path(root),
            ttl_seconds=_num("KLAYOUT_MCP_SESSION_TTL_SECONDS", 3600.0),
            klayout_bin=os.environ.get("KLAYOUT_BIN") or "klayout",
            allowed_roots=allowed + (BUILTIN_DECKS,),
            drc_timeout_seconds=_num("KLAYOUT_MCP_DRC_TIMEOUT_SECONDS", 600.0),
            limits=limits,
            deck_roots=() if policy is None else policy.deck_roots + (BUILTIN_DECKS,),
        )
