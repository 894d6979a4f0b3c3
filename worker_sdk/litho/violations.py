"""Violation records of RFC 0006 §2: rule deck, deterministic group ids, dedup, self-describing ids.

violation_group_id (§2b), bytes hashed with blake2b (digest_size 64), hex, first 16 chars:

    rule_deck_hash (utf-8 text "sha256:<hex>")
    + struct.pack(">d", dedup_radius_nm)
    + struct.pack(">d", canonical_location_nm[0])
    + struct.pack(">d", canonical_location_nm[1])
    + rule_id (utf-8)

Dedup runs after stitching, in the canvas frame. A per-tile region record
carries the bounding box of the stitched connected region it is a piece of
(`group_bbox`); records of one rule whose (group) boxes lie within
dedup_radius_nm of each other (transitively) form a group, so the grouping is
the same however tiles cut. The canonical location of a group is the centre of
the union of those boxes (for point rules, the point), rounded to 0.5 nm. The
record with the largest area (then lowest y, x, tile id) is `canonical`, the
others `shadow`.

violation_id (§5) is "v" + base32 (lowercase, unpadded) of 35 bytes (57 chars):
    major, minor, patch of schema_version (3 bytes)
    first 8 bytes of the rule deck sha256
    8 bytes of violation_group_id
    record index within the group (uint16; 0 = canonical)
    canonical location in half-nm (2 x int32)
    the record's offset from it in half-nm (2 x int16)
    coordinate frame code (uint8; index in COORDINATE_FRAMES)
    rule code (uint8)
so an id can be resolved without any cache once its layout is pinned.
"""
from __future__ import annotations

import base64
import hashlib
import struct
from dataclasses import dataclass
from typing import Any

from registry.canonical import digest_json

from .errors import BadRequest

SCHEMA_VERSION = "1.1.0"  # 1.1: topology rules and metrics, pvb_grid_nm2, process_window (additions only)
RULE_DECK_NAME = "dome-litho-iccad13-v2"  # v2: LithoBench EPE sampling, topology rules, configurable corners
COORDINATE_FRAMES = ("post_transform_canvas", "input_layout_native", "tile_local", "wafer_global")

RULES: dict[str, dict[str, Any]] = {
    "LITHO.L2.AREA": {"code": 1, "metric": "l2", "severity": "error", "dedup_radius_nm": 16.0,
                      "text": "nominal print differs from the target (connected region)"},
    "LITHO.PVB.AREA": {"code": 2, "metric": "pvb", "severity": "warning", "dedup_radius_nm": 16.0,
                       "text": "max and min corner prints differ (connected region of the PV band)"},
    "LITHO.EPE.15NM": {"code": 3, "metric": "epe", "severity": "error", "dedup_radius_nm": 1.0,
                       "text": "edge placement error beyond 15 nm at a LithoBench edge sample (one record per failed probe)"},
    "LITHO.TOPO.BRIDGE": {"code": 4, "metric": "topology", "severity": "error", "dedup_radius_nm": 16.0,
                          "text": "one printed shape joins two or more target shapes (at the named corner)"},
    "LITHO.TOPO.OPEN": {"code": 5, "metric": "topology", "severity": "error", "dedup_radius_nm": 16.0,
                        "text": "one target shape prints as two or more pieces (at the named corner)"},
    "LITHO.TOPO.EXTRA": {"code": 6, "metric": "topology", "severity": "error", "dedup_radius_nm": 16.0,
                         "text": "a printed shape overlaps no target shape (at the named corner)"},
    "LITHO.TOPO.MISSING": {"code": 7, "metric": "topology", "severity": "error", "dedup_radius_nm": 16.0,
                           "text": "a target shape does not print at all (at the named corner)"},
}
TOPOLOGY_RULES = {"bridge": "LITHO.TOPO.BRIDGE", "open": "LITHO.TOPO.OPEN", "extra": "LITHO.TOPO.EXTRA",
                  "missing": "LITHO.TOPO.MISSING"}
RULE_BY_CODE = {v["code"]: k for k, v in RULES.items()}


def rule_deck(fill: str, model_digests: dict[str, str], window: Any = None) -> dict[str, Any]:
    """The rule deck as data; its digest pins every group id. window: a ProcessWindow (default iccad13)."""
    from .process import DEFAULT

    w = window or DEFAULT
    return {
        "name": RULE_DECK_NAME,
        "fill": fill,
        "threshold": 0.225,
        "corners": [[c.name, c.kernel, c.dose] for c in w.corners],
        "pvb_grid": [[c.name, c.kernel, c.dose] for c in w.grid],
        "epe": {"constraint_nm": 15, "spacing_nm": 40, "short_nm": 80, "sampling": "lithobench"},
        "kernels": dict(sorted(model_digests.items())),
        "rules": {k: {kk: vv for kk, vv in v.items() if kk != "code"} for k, v in sorted(RULES.items())},
    }


def rule_deck_hash(deck: dict[str, Any]) -> str:
    return digest_json(deck)


def _half_nm(v: float) -> float:
    return round(v * 2.0) / 2.0


def group_id(deck_hash: str, radius_nm: float, location: tuple[float, float], rule_id: str) -> str:
    h = hashlib.blake2b()
    h.update(deck_hash.encode())
    h.update(struct.pack(">d", float(radius_nm)))
    h.update(struct.pack(">d", float(location[0])))
    h.update(struct.pack(">d", float(location[1])))
    h.update(rule_id.encode())
    return h.hexdigest()[:16]


@dataclass
class RawRecord:
    """A per-tile violation before dedup. Coordinates in canvas nm."""

    rule_id: str
    x: float
    y: float
    bbox: tuple[float, float, float, float]
    tile_id: str
    tile_origin: tuple[int, int]
    area: int = 0
    extra: dict[str, Any] | None = None
    group_bbox: tuple[float, float, float, float] | None = None  # the stitched region this piece belongs to

    @property
    def gbox(self) -> tuple[float, float, float, float]:
        return self.group_bbox if self.group_bbox is not None else self.bbox


def dedup(records: list[RawRecord], deck_hash: str) -> list[dict[str, Any]]:
    """Group records (per rule, within the rule's radius), derive group ids, tag canonical/shadow."""
    order = sorted(range(len(records)), key=lambda i: (records[i].rule_id, records[i].y, records[i].x, records[i].tile_id))
    parent = list(range(len(records)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    by_rule: dict[str, list[int]] = {}
    for i in order:
        by_rule.setdefault(records[i].rule_id, []).append(i)
    for rule_id, idx in by_rule.items():
        r = RULES[rule_id]["dedup_radius_nm"]
        # bbox-aware proximity: boxes closer than r (gap) join, which also joins a defect cut by a tile edge
        idx_sorted = sorted(idx, key=lambda i: records[i].gbox[1])
        active: list[int] = []
        for i in idx_sorted:
            bi = records[i].gbox
            active = [j for j in active if records[j].gbox[3] + r >= bi[1]]
            for j in active:
                bj = records[j].gbox
                gx = max(bi[0] - bj[2], bj[0] - bi[2], 0.0)
                gy = max(bi[1] - bj[3], bj[1] - bi[3], 0.0)
                if (gx * gx + gy * gy) <= r * r:
                    parent[find(i)] = find(j)
            active.append(i)
    groups: dict[int, list[int]] = {}
    for i in order:
        groups.setdefault(find(i), []).append(i)
    out: list[dict[str, Any]] = []
    for members in groups.values():
        rule_id = records[members[0]].rule_id
        radius = RULES[rule_id]["dedup_radius_nm"]
        bx0 = min(records[i].gbox[0] for i in members)
        by0 = min(records[i].gbox[1] for i in members)
        bx1 = max(records[i].gbox[2] for i in members)
        by1 = max(records[i].gbox[3] for i in members)
        loc = (_half_nm((bx0 + bx1) / 2.0), _half_nm((by0 + by1) / 2.0))
        gid = group_id(deck_hash, radius, loc, rule_id)
        ranked = sorted(members, key=lambda i: (-records[i].area, records[i].y, records[i].x, records[i].tile_id))
        for rank, i in enumerate(ranked):
            out.append({"record": records[i], "group_id": gid, "canonical_location": loc,
                        "canonical": rank == 0, "index": rank, "radius": radius})
    out.sort(key=lambda d: (d["record"].y, d["record"].x, d["record"].rule_id, d["index"]))
    return out


_ID_FORMAT = ">BBB8s8sHiihhBB"
_ID_BYTES = struct.calcsize(_ID_FORMAT)
_ID_CHARS = 1 + (_ID_BYTES * 8 + 4) // 5


def _pack(version: str, deck_prefix: bytes, gid: str, index: int, location: tuple[float, float],
          offset: tuple[float, float], frame: str, rule_id: str) -> str:
    major, minor, patch = (int(p) for p in version.split("."))
    payload = struct.pack(_ID_FORMAT, major, minor, patch, deck_prefix, bytes.fromhex(gid), index,
                          int(round(location[0] * 2)), int(round(location[1] * 2)),
                          max(-32768, min(32767, int(round(offset[0] * 2)))),
                          max(-32768, min(32767, int(round(offset[1] * 2)))),
                          COORDINATE_FRAMES.index(frame) if frame in COORDINATE_FRAMES else 255,
                          RULES[rule_id]["code"])
    return "v" + base64.b32encode(payload).decode().rstrip("=").lower()


def encode_violation_id(deck_hash: str, gid: str, index: int, location: tuple[float, float],
                        rule_id: str, frame: str = "post_transform_canvas",
                        offset: tuple[float, float] = (0.0, 0.0)) -> str:
    """Self-describing id; offset is the record's own location minus the group's canonical location."""
    deck = bytes.fromhex(deck_hash.split(":", 1)[1][:16])
    return _pack(SCHEMA_VERSION, deck, gid, index, location, offset, frame, rule_id)


def reencode(dec: "DecodedId", index: int) -> str:
    """The id of another record of the same group (index 0 = the canonical record, offset 0)."""
    off = dec.offset if index == dec.index else (0.0, 0.0)
    return _pack(dec.schema_version, bytes.fromhex(dec.deck_prefix), dec.group_id, index, dec.location, off,
                 dec.frame, dec.rule_id)


@dataclass(frozen=True)
class DecodedId:
    schema_version: str
    deck_prefix: str
    group_id: str
    index: int
    location: tuple[float, float]
    frame: str
    rule_id: str
    offset: tuple[float, float] = (0.0, 0.0)


def decode_violation_id(vid: str) -> DecodedId:
    if not isinstance(vid, str) or not vid.startswith("v") or len(vid) != _ID_CHARS:
        raise BadRequest("malformed violation_id", code="INVALID_VIOLATION_ID", details={"violation_id": vid})
    try:
        raw = base64.b32decode(vid[1:].upper() + "=" * (-len(vid[1:]) % 8))
        major, minor, patch, deck, gid, index, x2, y2, ox2, oy2, frame, rule = struct.unpack(_ID_FORMAT, raw)
        frame_name = COORDINATE_FRAMES[frame] if frame < len(COORDINATE_FRAMES) else "unknown"
        return DecodedId(f"{major}.{minor}.{patch}", deck.hex(), gid.hex(), index, (x2 / 2.0, y2 / 2.0),
                         frame_name, RULE_BY_CODE[rule], (ox2 / 2.0, oy2 / 2.0))
    except Exception as exc:
        raise BadRequest("malformed violation_id", code="INVALID_VIOLATION_ID", details={"violation_id": vid}) from exc
