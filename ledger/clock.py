"""Time stamps and ids of ledger records: one UTC clock and time-ordered UUIDv7 ids.

Both are on every append's path, so the clock formats the date and time of day once
per second and the ids come from one urandom read per batch.
"""
from __future__ import annotations

import os
import time
from datetime import datetime, timezone


_SECOND: tuple[int, str] = (-1, "")  # (Unix second, its "YYYY-MM-DDTHH:MM:SS"), replaced whole


def utc_now() -> str:
    """RFC 3339 UTC timestamp with microseconds, e.g. 2026-01-02T03:04:05.000006Z: what
    `datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")` gives (microseconds
    rounded down), with the date and time of day formatted once per second."""
    global _SECOND
    seconds, micros = divmod(time.time_ns() // 1000, 1_000_000)
    known = _SECOND
    if known[0] != seconds:
        known = _SECOND = (seconds, utc_second(seconds))
    return f"{known[1]}.{micros:06d}Z"


def utc_second(seconds: int) -> str:
    """"YYYY-MM-DDTHH:MM:SS" of a Unix second, in UTC."""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


_UUID7_LAST = [0, 0]  # (ms, counter) of the last id handed out by this process


def new_event_ids(n: int) -> list[str]:
    """n UUIDv7 strings (RFC 9562): 48-bit Unix milliseconds, a 12-bit counter
    that keeps ids from one process increasing, 62 random bits. Time-ordered
    ids keep the unique event_id index append-mostly (fast inserts)."""
    ms = time.time_ns() // 1_000_000
    last_ms, counter = _UUID7_LAST
    if ms <= last_ms:
        ms, counter = last_ms, counter + 1
    else:
        counter = 0
    rand = os.urandom(8 * n)
    out = []
    for k in range(n):
        if counter > 0xFFF:
            ms, counter = ms + 1, 0
        b = int.from_bytes(rand[8 * k:8 * k + 8], "big") & 0x3FFFFFFFFFFFFFFF | 0x8000000000000000
        h = f"{ms:012x}7{counter:03x}{b:016x}"
        out.append(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
        counter += 1
    _UUID7_LAST[0], _UUID7_LAST[1] = ms, counter - 1
    return out
