"""Parse `git diff --binary --full-index` output (strict)."""
from __future__ import annotations

from typing import Any

from .model import HUNK_RE, MODE_RE, OID_RE, BinaryPatch, DiffError, FilePatch, Hunk, ParsedDiff
from .quoting import parse_git_line, parse_name


def _as_bytes(diff: bytes | str) -> bytes:
    if isinstance(diff, str):
        return diff.encode("utf-8", "surrogateescape")
    if isinstance(diff, (bytes, bytearray, memoryview)):
        return bytes(diff)
    raise DiffError(f"a diff is bytes or str, not {type(diff).__name__}")


def parse_diff(diff: bytes | str) -> ParsedDiff:
    """Parse ``git diff --binary --full-index`` output (strict; raises DiffError)."""
    data = _as_bytes(diff)
    if not data:
        return ParsedDiff(())
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    n = len(lines)
    i = 0
    while i < n and not lines[i].startswith(b"diff --git "):
        i += 1
    files: list[FilePatch] = []
    while i < n:
        fp, i = _parse_file(lines, i)
        files.append(fp)
    seen: set[str] = set()
    for fp in files:
        for p in fp.paths:
            if p in seen:
                raise DiffError(f"path {p!r} appears in more than one file section",
                                code="DIFF_DUPLICATE_PATH", details={"path": p})
            seen.add(p)
    files.sort(key=FilePatch.sort_key)
    return ParsedDiff(tuple(files))


def _parse_file(lines: list[bytes], i: int) -> tuple[FilePatch, int]:
    """One file section: its `diff --git` line, extended headers, then hunks or a binary patch."""
    a_path, b_path = parse_git_line(lines[i][len(b"diff --git "):])
    hdr, i = _parse_headers(lines, i + 1)
    old_path, new_path = _file_paths(a_path, b_path, hdr)
    hunks, binary, i = _parse_body(lines, i, b_path)
    if (hunks or binary) and "old_oid" not in hdr:
        raise DiffError("file section has content but no index line",
                        code="DIFF_NOT_FULL_INDEX",
                        hints=["produce the diff with git diff --binary --full-index"])
    if hunks and ("old_name" not in hdr or "new_name" not in hdr):
        raise DiffError("text hunks without ---/+++ lines")
    return FilePatch(
        old_path=old_path, new_path=new_path,
        old_mode=hdr.get("old_mode"), new_mode=hdr.get("new_mode"),
        old_oid=hdr.get("old_oid", ""), new_oid=hdr.get("new_oid", ""),
        similarity=hdr.get("similarity"), copy=bool(hdr.get("copy")),
        hunks=tuple(hunks), binary=binary, binary_no_data=False,
    ), i


def _parse_headers(lines: list[bytes], i: int) -> tuple[dict[str, Any], int]:
    """The extended header lines up to the first hunk, binary patch or next file. `old_name` and
    `new_name` (the ---/+++ names) are present only when those lines were given."""
    hdr: dict[str, Any] = {}
    n = len(lines)
    while i < n:
        ln = lines[i]
        if ln.startswith(b"diff --git ") or ln.startswith(b"@@ ") or ln == b"GIT binary patch" \
                or ln.startswith(b"Binary files "):
            break
        _header_line(ln, hdr)
        i += 1
    return hdr, i


def _header_line(ln: bytes, hdr: dict[str, Any]) -> None:
    """What one extended header line says, into `hdr`; an unknown or malformed one is a DiffError."""
    if ln.startswith(b"--- "):
        hdr["old_name"] = parse_name(ln[4:], b"a/")
    elif ln.startswith(b"+++ "):
        hdr["new_name"] = parse_name(ln[4:], b"b/")
    elif ln.startswith(b"old mode "):
        hdr["old_mode"] = ln[9:].decode("ascii", "replace")
    elif ln.startswith(b"new mode "):
        hdr["new_mode"] = ln[9:].decode("ascii", "replace")
    elif ln.startswith(b"deleted file mode "):
        hdr["deleted"] = True
        hdr["old_mode"] = ln[18:].decode("ascii", "replace")
    elif ln.startswith(b"new file mode "):
        hdr["created"] = True
        hdr["new_mode"] = ln[14:].decode("ascii", "replace")
    elif ln.startswith(b"similarity index ") or ln.startswith(b"dissimilarity index "):
        pct = ln.split(b" ")[-1].rstrip(b"%")
        if not pct.isdigit():
            raise DiffError("bad similarity index")
        hdr["similarity"] = int(pct)
    elif ln.startswith(b"rename from ") or ln.startswith(b"copy from "):
        hdr["src"] = parse_name(ln.split(b" ", 2)[2], b"")
        hdr["copy"] = ln.startswith(b"copy")
    elif ln.startswith(b"rename to ") or ln.startswith(b"copy to "):
        hdr["dst"] = parse_name(ln.split(b" ", 2)[2], b"")
    elif ln.startswith(b"index "):
        _index_line(ln, hdr)
    else:
        raise DiffError("unknown extended header line",
                        details={"line": ln[:120].decode("utf-8", "replace")})


def _index_line(ln: bytes, hdr: dict[str, Any]) -> None:
    """`index OLD..NEW [MODE]`: both object ids in full, or the diff is refused."""
    spec = ln[6:].split(b" ")
    oids = spec[0].split(b"..")
    if len(oids) != 2 or not all(OID_RE.match(o) for o in oids):
        raise DiffError("index line without full object ids",
                        code="DIFF_NOT_FULL_INDEX",
                        details={"line": ln[:120].decode("latin-1")},
                        hints=["produce the diff with git diff --binary --full-index"])
    hdr["old_oid"], hdr["new_oid"] = oids[0].decode(), oids[1].decode()
    if len(spec) == 2:
        hdr["old_mode"] = hdr["new_mode"] = spec[1].decode("ascii", "replace")
    elif len(spec) > 2:
        raise DiffError("bad index line")


def _file_paths(a_path: str, b_path: str, hdr: dict[str, Any]) -> tuple[str | None, str | None]:
    """The file's old and new path (None for a created or deleted file); the ---/+++ names and
    the modes must agree with the headers."""
    old_path: str | None = a_path
    new_path: str | None = b_path
    if "src" in hdr or "dst" in hdr:
        old_path, new_path = hdr.get("src", a_path), hdr.get("dst", b_path)
    if hdr.get("created"):
        old_path = None
    if hdr.get("deleted"):
        new_path = None
    if "old_name" in hdr and hdr["old_name"] != old_path:
        raise DiffError("--- name disagrees with the diff --git line", details={"path": a_path})
    if "new_name" in hdr and hdr["new_name"] != new_path:
        raise DiffError("+++ name disagrees with the diff --git line", details={"path": b_path})
    for key in ("old_mode", "new_mode"):
        if key in hdr and not MODE_RE.match(hdr[key]):
            raise DiffError(f"bad file mode {hdr[key]!r}", details={"mode": hdr[key]})
    return old_path, new_path


def _parse_body(lines: list[bytes], i: int, b_path: str) -> tuple[list[Hunk], BinaryPatch | None, int]:
    """The section's content: a binary patch (with its data), or text hunks, or nothing."""
    n = len(lines)
    if i < n and lines[i] == b"GIT binary patch":
        start = i = i + 1
        while i < n and not lines[i].startswith(b"diff --git "):
            i += 1
        body = tuple(lines[start:i])
        while body and body[-1] == b"":
            body = body[:-1]
        binary = BinaryPatch(body)
        binary.parts()  # validates headers
        return [], binary, i
    if i < n and lines[i].startswith(b"Binary files "):
        raise DiffError("binary change without data", code="DIFF_BINARY_WITHOUT_DATA",
                        details={"path": b_path},
                        hints=["produce the diff with git diff --binary --full-index"])
    hunks: list[Hunk] = []
    while i < n and lines[i].startswith(b"@@ "):
        hunk, i = _parse_hunk(lines, i)
        hunks.append(hunk)
    if i < n and not lines[i].startswith(b"diff --git "):
        raise DiffError("unexpected line after hunks",
                        details={"line": lines[i][:120].decode("utf-8", "replace")})
    return hunks, None, i


def _parse_hunk(lines: list[bytes], i: int) -> tuple[Hunk, int]:
    m = HUNK_RE.match(lines[i])
    if not m:
        raise DiffError("bad hunk header", details={"line": lines[i][:120].decode("utf-8", "replace")})
    old_start, new_start = int(m.group(1)), int(m.group(3))
    old_count = 1 if m.group(2) is None else int(m.group(2))
    new_count = 1 if m.group(4) is None else int(m.group(4))
    i += 1
    body: list[bytes] = []
    old_seen = new_seen = 0
    n = len(lines)
    while i < n and (old_seen < old_count or new_seen < new_count):
        ln = lines[i]
        tag = ln[:1]
        if tag == b" ":
            old_seen += 1
            new_seen += 1
        elif tag == b"-":
            old_seen += 1
        elif tag == b"+":
            new_seen += 1
        elif tag == b"\\":
            if not body:
                raise DiffError("no-newline marker before any line")
        elif ln == b"":
            # some tools strip the space of an empty context line
            ln = b" "
            old_seen += 1
            new_seen += 1
        else:
            raise DiffError("hunk shorter than its header says",
                            details={"line": ln[:120].decode("utf-8", "replace")})
        body.append(ln)
        i += 1
    if old_seen != old_count or new_seen != new_count:
        raise DiffError("hunk line counts do not match its header",
                        details={"expected": [old_count, new_count], "seen": [old_seen, new_seen]})
    if i < n and lines[i][:1] == b"\\":
        body.append(lines[i])
        i += 1
    return Hunk(old_start, old_count, new_start, new_count, tuple(body)), i
