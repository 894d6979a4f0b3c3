"""Git pack deltas for an object that is a small edit of another (pure functions).

A checkpoint per proposal writes a new tree for every directory it touched,
and a directory that gains one entry per proposal has a tree as large as the
directory each time. Stored whole, a stack of N proposals compresses
trees of N squared total size; stored as a delta against the directory's
previous tree in the same pack, each costs a copy, an insert and a copy.

`delta(base, target)` writes git's delta format (Documentation/gitformat-pack):
the two sizes as little-endian base-128 varints, then copy instructions
(0x80 | which offset and size bytes follow) and insert instructions (a length
of 1 to 127, then that many literal bytes). The edit is found as the longest
common prefix and suffix, compared in growing blocks (C memcmp), so a 380 KB
tree costs tens of microseconds, not a byte-by-byte scan.
"""
from __future__ import annotations

from typing import Callable

_FIRST_BLOCK = 4096
_MAX_COPY = 0xFFFFFF  # a copy instruction's size has three bytes
_MAX_INSERT = 0x7F


def _longest(limit: int, same: Callable[[int, int], bool]) -> int:
    """The largest k <= limit such that positions [0, k) agree, where same(lo, hi) says
    whether [lo, hi) does: blocks that double while they agree, then halving."""
    lo, step = 0, _FIRST_BLOCK  # [0, lo) agrees
    while True:
        end = min(lo + step, limit)
        if not same(lo, end):
            hi = end  # [lo, hi) does not
            break
        if end == limit:
            return limit
        lo, step = end, step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if same(lo, mid):
            lo = mid
        else:
            hi = mid
    return lo


def common_prefix(a: bytes, b: bytes) -> int:
    """The length of the longest common prefix of a and b."""
    return _longest(min(len(a), len(b)), lambda lo, hi: a[lo:hi] == b[lo:hi])


def common_suffix(a: bytes, b: bytes, limit: int) -> int:
    """The length of the longest common suffix of a and b, at most `limit`."""
    la, lb = len(a), len(b)
    return _longest(limit, lambda lo, hi: a[la - hi:la - lo] == b[lb - hi:lb - lo])


def varint(n: int) -> bytes:
    """A delta header size: little-endian base 128, high bit set on all but the last byte."""
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _copy(out: bytearray, offset: int, size: int) -> None:
    while size:
        part = min(size, _MAX_COPY)
        cmd, args = 0x80, bytearray()
        for i in range(4):
            byte = (offset >> (8 * i)) & 0xFF
            if byte:
                cmd |= 1 << i
                args.append(byte)
        for i in range(3):
            byte = (part >> (8 * i)) & 0xFF
            if byte:
                cmd |= 0x10 << i
                args.append(byte)
        out.append(cmd)
        out += args
        offset += part
        size -= part


def _insert(out: bytearray, data: bytes) -> None:
    for i in range(0, len(data), _MAX_INSERT):
        chunk = data[i:i + _MAX_INSERT]
        out.append(len(chunk))
        out += chunk


def delta(base: bytes, target: bytes) -> bytes:
    """Instructions that rebuild `target` from `base`: copy the common prefix, insert
    what differs, copy the common suffix."""
    if len(base) > 0xFFFFFFFF:  # a copy's offset has four bytes
        raise ValueError("delta: base object over 4 GiB")
    p = common_prefix(base, target)
    s = common_suffix(base, target, min(len(base), len(target)) - p)
    out = bytearray(varint(len(base)) + varint(len(target)))
    _copy(out, 0, p)
    _insert(out, target[p:len(target) - s])
    _copy(out, len(base) - s, s)
    return bytes(out)


def ofs_distance(distance: int) -> bytes:
    """An OFS_DELTA entry's distance back to its base: big-endian base 128 where each
    byte after the first stands for one more than its bits (git's encoding)."""
    out = bytearray([distance & 0x7F])
    distance >>= 7
    while distance:
        distance -= 1
        out.insert(0, 0x80 | (distance & 0x7F))
        distance >>= 7
    return bytes(out)
