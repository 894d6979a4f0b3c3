"""Stable hunk fingerprints (`dome-hunk-fp/v1`, see the package docs)."""
from __future__ import annotations

import hashlib
from typing import Any, Iterable

from .model import FINGERPRINT_VERSION, FilePatch, ParsedDiff
from .parse import parse_diff
from .quoting import quote_path


def _norm_line(line: bytes) -> bytes:
    if line.endswith(b"\r"):
        line = line[:-1]
    return line.replace(b"\r", b"\n").rstrip(b" \t")


def _fp_digest(parts: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
        h.update(b"\n")
    return "sha256:" + h.hexdigest()


def file_fingerprints(fp: FilePatch, base_ref: str) -> list[dict[str, Any]]:
    """The fingerprints of one file section (see module docs)."""
    path = fp.path
    out: list[dict[str, Any]] = []

    def mk(ctx: str, edit: str, rng: dict[str, int] | None, kind: str) -> dict[str, Any]:
        out = {"path": path, "base_ref": base_ref, "base_context_digest": ctx,
               "edit_digest": edit, "kind": kind, "fingerprint_version": FINGERPRINT_VERSION}
        if rng is not None:
            out["range_hint"] = rng
        return out

    if fp.hunks and not fp.is_new and not fp.is_deleted:
        for h in fp.hunks:
            pre = [_norm_line(x) for x in h.preimage()]
            edit = [ln[:1] + _norm_line(ln[1:]) for ln in h.lines if ln[:1] in (b"-", b"+")]
            if h.old_count == 0:
                rng = {"start": h.old_start, "end": h.old_start}
            else:
                rng = {"start": h.old_start, "end": h.old_start + h.old_count - 1}
            out.append(mk(_fp_digest(pre), _fp_digest(edit), rng, "hunk"))
    # whole-file facts: creation, deletion, binary, mode or path changes
    whole: list[bytes] = []
    if fp.is_new or fp.is_deleted or fp.binary is not None or fp.binary_no_data:
        whole.append(b"content " + fp.old_oid.encode() + b".." + fp.new_oid.encode())
    if fp.mode_changed or fp.is_new or fp.is_deleted:
        whole.append(b"mode " + (fp.old_mode or "-").encode() + b".." + (fp.new_mode or "-").encode())
    if fp.is_rename:
        whole.append(b"path " + quote_path(fp.old_path or "") + b".." + quote_path(fp.new_path or ""))
    if whole or not out:
        ctx = _fp_digest([b"blob " + (fp.old_oid or "").encode(), b"path " + quote_path(path)])
        out.append(mk(ctx, _fp_digest(whole), None, "file"))
        if fp.is_rename and fp.new_path is not None:
            # the destination path is claimed too
            dest = dict(out[-1])
            dest["path"] = fp.new_path
            out.append(dest)
    return out


def hunk_fingerprints(diff: bytes | str | ParsedDiff, base_ref: str) -> list[dict[str, Any]]:
    """Stable hunk fingerprints (JSON-ready dicts), in canonical diff order."""
    parsed = diff if isinstance(diff, ParsedDiff) else parse_diff(diff)
    out: list[dict[str, Any]] = []
    for fp in parsed.files:
        out.extend(file_fingerprints(fp, base_ref))
    return out
