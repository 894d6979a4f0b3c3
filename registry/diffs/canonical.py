"""The canonical bytes of a diff, its digest and touched files."""
from __future__ import annotations

import hashlib

from .model import (DIFF_CANONICALIZATION, SUPPORTED_CANONICALIZATIONS, FilePatch, ParsedDiff,
                    UnsupportedCanonicalization)
from .parse import parse_diff
from .quoting import quote_path


def _range(start: int, count: int) -> bytes:
    return b"%d" % start if count == 1 else b"%d,%d" % (start, count)


def _name_line(marker: bytes, prefix: bytes, path: str | None) -> bytes:
    if path is None:
        return marker + b"/dev/null"
    q = quote_path(path)
    tab = b"\t" if " " in path and marker else b""  # git: a tab after names with a space
    if q.startswith(b'"'):
        return marker + b'"' + prefix + q[1:] + tab
    return marker + prefix + q + tab


def _prefixed(prefix: bytes, path: str) -> bytes:
    q = quote_path(path)
    return b'"' + prefix + q[1:] if q.startswith(b'"') else prefix + q


def serialize_file(fp: FilePatch) -> list[bytes]:
    a = fp.old_path if fp.old_path is not None else fp.new_path
    b = fp.new_path if fp.new_path is not None else fp.old_path
    assert a is not None and b is not None
    out = [b"diff --git " + _prefixed(b"a/", a) + b" " + _prefixed(b"b/", b)]
    same_mode = fp.old_mode is not None and fp.old_mode == fp.new_mode
    if fp.is_new:
        out.append(b"new file mode " + (fp.new_mode or "100644").encode())
    elif fp.is_deleted:
        out.append(b"deleted file mode " + (fp.old_mode or "100644").encode())
    elif fp.mode_changed:
        out.append(b"old mode " + fp.old_mode.encode())  # type: ignore[union-attr]
        out.append(b"new mode " + fp.new_mode.encode())  # type: ignore[union-attr]
    if fp.is_rename or fp.similarity is not None:
        if fp.similarity is not None:
            word = b"similarity index " if fp.is_rename or fp.copy else b"dissimilarity index "
            out.append(word + b"%d%%" % fp.similarity)
        if fp.is_rename:
            verb = b"copy" if fp.copy else b"rename"
            out.append(verb + b" from " + quote_path(fp.old_path))  # type: ignore[arg-type]
            out.append(verb + b" to " + quote_path(fp.new_path))  # type: ignore[arg-type]
    if fp.old_oid:
        line = b"index " + fp.old_oid.encode() + b".." + fp.new_oid.encode()
        if same_mode and not fp.is_new and not fp.is_deleted:
            line += b" " + fp.old_mode.encode()  # type: ignore[union-attr]
        out.append(line)
    if fp.binary is not None:
        out.append(b"GIT binary patch")
        out.extend(fp.binary.lines)
        out.append(b"")
    elif fp.binary_no_data:
        out.append(b"Binary files " + _name_line(b"", b"a/", fp.old_path) + b" and "
                   + _name_line(b"", b"b/", fp.new_path) + b" differ")
    elif fp.hunks:
        out.append(_name_line(b"--- ", b"a/", fp.old_path))
        out.append(_name_line(b"+++ ", b"b/", fp.new_path))
        for h in fp.hunks:
            out.append(b"@@ -" + _range(h.old_start, h.old_count) + b" +"
                       + _range(h.new_start, h.new_count) + b" @@")
            out.extend(h.lines)
    return out


def serialize_diff(parsed: ParsedDiff) -> bytes:
    lines: list[bytes] = []
    for fp in parsed.files:
        lines.extend(serialize_file(fp))
    return b"\n".join(lines) + b"\n" if lines else b""


def check_canonicalization(name: str) -> None:
    if name not in SUPPORTED_CANONICALIZATIONS:
        raise UnsupportedCanonicalization(
            f"unknown diff canonicalization {name!r}",
            details={"canonicalization": name, "supported": list(SUPPORTED_CANONICALIZATIONS)})


def canonicalize_diff(diff: bytes | str, canonicalization: str = DIFF_CANONICALIZATION) -> bytes:
    """The canonical bytes of a diff under `canonicalization`."""
    check_canonicalization(canonicalization)
    return serialize_diff(parse_diff(diff))


def sha_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def diff_digest(diff: bytes | str, canonicalization: str = DIFF_CANONICALIZATION) -> str:
    """sha256 of the canonical form ("sha256:<hex>")."""
    return sha_digest(canonicalize_diff(diff, canonicalization))


def touched_files(diff: bytes | str | ParsedDiff) -> list[str]:
    parsed = diff if isinstance(diff, ParsedDiff) else parse_diff(diff)
    return parsed.touched_files()
