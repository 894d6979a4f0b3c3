"""Everything a PatchProposal needs from its diff, in one pass."""
from __future__ import annotations

from typing import Any

from .canonical import serialize_diff, sha_digest
from .fingerprints import hunk_fingerprints
from .model import DIFF_CANONICALIZATION, ParsedDiff
from .parse import parse_diff


def describe_diff(diff: bytes | str, base_ref: str) -> dict[str, Any]:
    """Everything a PatchProposal needs from its diff, in one pass.

    Returns ``{"canonical": bytes, "diff_canonicalization", "diff_digest",
    "touched_files", "hunk_fingerprints", "stats"}``.
    """
    parsed = parse_diff(diff)
    canonical = serialize_diff(parsed)
    return {
        "canonical": canonical,
        "diff_canonicalization": DIFF_CANONICALIZATION,
        "diff_digest": sha_digest(canonical),
        "touched_files": parsed.touched_files(),
        "hunk_fingerprints": hunk_fingerprints(parsed, base_ref),
        "stats": diff_stats(parsed),
    }


def diff_stats(parsed: ParsedDiff) -> dict[str, int]:
    return {
        "files": len(parsed.files),
        "hunks": sum(len(f.hunks) for f in parsed.files),
        "added": sum(h.added for f in parsed.files for h in f.hunks),
        "removed": sum(h.removed for f in parsed.files for h in f.hunks),
        "binary_files": sum(1 for f in parsed.files if f.binary is not None or f.binary_no_data),
    }
