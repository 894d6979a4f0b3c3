"""Sub-diffs of whole files or single hunks (used by guarded splits)."""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from .model import DiffError, FilePatch, Hunk, ParsedDiff


def select(parsed: ParsedDiff, keep: Sequence[tuple[str, int | None]]) -> ParsedDiff:
    """A sub-diff keeping whole files (``(path, None)``) or single hunks
    (``(path, hunk_index)``). New-side line numbers of kept hunks are
    recomputed so the result applies on the same base."""
    wanted: dict[str, set[int] | None] = {}
    for path, idx in keep:
        if idx is None:
            wanted[path] = None
        elif path not in wanted or wanted[path] is not None:
            wanted.setdefault(path, set()).add(idx)  # type: ignore[union-attr]
    files: list[FilePatch] = []
    for fp in parsed.files:
        if fp.path not in wanted:
            continue
        idxs = wanted[fp.path]
        if idxs is None:
            files.append(fp)
            continue
        if not fp.hunks or fp.is_new or fp.is_deleted or fp.is_rename or fp.mode_changed:
            raise DiffError("only plain text edits can be split by hunk",
                            code="DIFF_SPLIT_UNSUPPORTED", details={"path": fp.path})
        kept: list[Hunk] = []
        orig_delta = kept_delta = 0
        for k, h in enumerate(fp.hunks):
            if k in idxs:
                kept.append(replace(h, new_start=h.new_start - (orig_delta - kept_delta)))
                kept_delta += h.new_count - h.old_count
            orig_delta += h.new_count - h.old_count
        if not kept:
            continue
        # the index line no longer names the true postimage blob: keep only the preimage
        files.append(replace(fp, hunks=tuple(kept), new_oid=_partial_oid(fp)))
    return ParsedDiff(tuple(sorted(files, key=FilePatch.sort_key)))


def _partial_oid(fp: FilePatch) -> str:
    # git apply --3way needs the preimage id only; the postimage id of a partial
    # patch is unknown, written as all zeros like git does for unknown blobs.
    return "0" * len(fp.old_oid)
