"""Strict in-memory application of text hunks (the fast path of apply-check
and the canvas): no fuzz, no offset search."""
from __future__ import annotations

from .model import FilePatch, Hunk, PatchDoesNotApply


def _split_lines(content: bytes) -> list[bytes]:
    """Lines with their LF (the last one may lack it)."""
    if not content:
        return []
    parts = content.split(b"\n")
    out = [p + b"\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def _hunk_sides(h: Hunk) -> tuple[list[bytes], list[bytes]]:
    pre: list[bytes] = []
    post: list[bytes] = []
    last: list[list[bytes]] = []
    for ln in h.lines:
        tag = ln[:1]
        if tag == b"\\":
            for side in last:
                side[-1] = side[-1][:-1]  # drop the LF: no newline at end of file
            continue
        body = ln[1:] + b"\n"
        if tag == b" ":
            pre.append(body)
            post.append(body)
            last = [pre, post]
        elif tag == b"-":
            pre.append(body)
            last = [pre]
        else:
            post.append(body)
            last = [post]
    return pre, post


def apply_text(fp: FilePatch, content: bytes) -> bytes:
    """Apply the text hunks of `fp` to `content` exactly at their stated base
    lines (no fuzz, no offset search); raise PatchDoesNotApply otherwise."""
    lines = _split_lines(content)
    out: list[bytes] = []
    pos = 0
    for h in fp.hunks:
        pre, post = _hunk_sides(h)
        start = h.old_start - 1 if h.old_count else h.old_start
        if start < pos or lines[start:start + len(pre)] != pre:
            raise PatchDoesNotApply("hunk preimage does not match the base",
                                    details={"path": fp.path, "old_start": h.old_start})
        out.extend(lines[pos:start])
        out.extend(post)
        pos = start + len(pre)
    out.extend(lines[pos:])
    return b"".join(out)
