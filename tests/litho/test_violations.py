"""Violation records: deterministic group ids, tile-boundary dedup, self-describing ids (RFC 0006 §2, §5)."""
from __future__ import annotations

import hashlib
import random
import struct

import pytest

from worker_sdk.litho.errors import BadRequest
from worker_sdk.litho.violations import (RawRecord, decode_violation_id, dedup, encode_violation_id, group_id,
                                         reencode)

DECK = "sha256:" + "ab" * 32


def test_group_id_is_the_specified_blake2b_derivation():
    h = hashlib.blake2b()
    h.update(DECK.encode())
    h.update(struct.pack(">d", 16.0))
    h.update(struct.pack(">d", 120.5))
    h.update(struct.pack(">d", 7.0))
    h.update(b"LITHO.L2.AREA")
    assert group_id(DECK, 16.0, (120.5, 7.0), "LITHO.L2.AREA") == h.hexdigest()[:16]
    other = "sha256:" + "cd" * 32
    assert group_id(other, 16.0, (120.5, 7.0), "LITHO.L2.AREA") != group_id(DECK, 16.0, (120.5, 7.0), "LITHO.L2.AREA")


def _fixture(seed: int):
    """100 records over 4 tiles; 12 defects straddle a tile edge and are emitted by both tiles."""
    rng = random.Random(seed)
    recs = []
    tiles = {"T_0_0": (0, 0), "T_0_1": (1024, 0), "T_1_0": (0, 1024), "T_1_1": (1024, 1024)}
    # 12 collisions: pieces on each side of x = 1024 (tile edge), touching
    for k in range(12):
        y = 100 + 150 * k
        row = "T_0" if y < 1024 else "T_1"
        recs.append(RawRecord("LITHO.L2.AREA", 1014, y + 5, (1004, y, 1024, y + 10), f"{row}_0", tiles[f"{row}_0"], 200))
        recs.append(RawRecord("LITHO.L2.AREA", 1030, y + 5, (1024, y, 1036, y + 10), f"{row}_1", tiles[f"{row}_1"], 120))
    # 76 isolated records, far from each other
    placed = 0
    while placed < 76:
        x, y = rng.randrange(0, 2000, 100) + 40, rng.randrange(0, 2000, 100) + 40
        if abs(x - 1024) < 100 or any(abs(r.x - x) < 60 and abs(r.y - y) < 60 for r in recs):
            continue
        tile = f"T_{int(y >= 1024)}_{int(x >= 1024)}"
        recs.append(RawRecord("LITHO.PVB.AREA", x, y, (x - 3, y - 3, x + 3, y + 3), tile, tiles[tile], 36))
        placed += 1
    rng.shuffle(recs)
    return recs


def test_dedup_100_records_4_tiles_12_collisions():
    out = dedup(_fixture(1), DECK)
    assert len(out) == 100
    canon = [d for d in out if d["canonical"]]
    shadows = [d for d in out if not d["canonical"]]
    assert len(canon) == 88 and len(shadows) == 12
    groups = {}
    for d in out:
        groups.setdefault(d["group_id"], []).append(d)
    assert len(groups) == 88
    collided = [g for g in groups.values() if len(g) == 2]
    assert len(collided) == 12
    for g in collided:
        assert {d["record"].tile_id[-1] for d in g} == {"0", "1"}
        assert sum(d["canonical"] for d in g) == 1
        # the canonical record is the larger piece; the group's location is the union bbox centre
        assert next(d for d in g if d["canonical"])["record"].area == 200
        assert g[0]["canonical_location"][0] == 1020.0
    # deterministic across runs and input orders
    again = dedup(list(reversed(_fixture(1))), DECK)
    assert sorted(d["group_id"] for d in out) == sorted(d["group_id"] for d in again)


def test_group_id_is_stable_under_tile_repartitioning():
    whole = [RawRecord("LITHO.L2.AREA", 1020, 105, (1004, 100, 1036, 110), "T_0_0", (0, 0), 320)]
    split = [RawRecord("LITHO.L2.AREA", 1014, 105, (1004, 100, 1024, 110), "T_0_0", (0, 0), 200),
             RawRecord("LITHO.L2.AREA", 1030, 105, (1024, 100, 1036, 110), "T_0_1", (1024, 0), 120)]
    assert {d["group_id"] for d in dedup(whole, DECK)} == {d["group_id"] for d in dedup(split, DECK)}


def test_violation_id_is_self_describing_and_round_trips():
    gid = group_id(DECK, 16.0, (1020.0, 105.0), "LITHO.L2.AREA")
    vid = encode_violation_id(DECK, gid, 1, (1020.0, 105.0), "LITHO.L2.AREA", offset=(10.0, 0.0))
    assert vid.startswith("v") and len(vid) == 57 and vid[1:].isalnum() and vid == vid.lower()
    dec = decode_violation_id(vid)
    assert dec.group_id == gid and dec.index == 1 and dec.rule_id == "LITHO.L2.AREA"
    assert dec.location == (1020.0, 105.0) and dec.offset == (10.0, 0.0)
    assert dec.frame == "post_transform_canvas" and dec.schema_version == "1.1.0"
    assert dec.deck_prefix == DECK.split(":")[1][:16]
    canonical = decode_violation_id(reencode(dec, 0))
    assert canonical.index == 0 and canonical.offset == (0.0, 0.0) and canonical.group_id == gid


@pytest.mark.parametrize("bad", ["", "x" * 57, "v" + "1" * 56, "v" + "a" * 10])
def test_malformed_violation_id(bad):
    with pytest.raises(BadRequest):
        decode_violation_id(bad)
