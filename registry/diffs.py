"""Canonical git diffs, their digests, and stable hunk fingerprints (pure).

Both sides of a patch call this module: the worker's PatchProposal builder
(to fill `diff_canonicalization`, `diff_digest`, `touched_files`,
`hunk_fingerprints`) and the coordinator (to recompute and compare them).
Nothing here touches a repository; everything is bytes in, data out.

Canonicalization ``git-binary-full-index/v1``
---------------------------------------------
Input is the output of ``git diff --binary --full-index`` (bytes; ``str`` is
accepted and encoded as UTF-8 with surrogateescape). The canonical form is
``serialize(parse(input))``, which fixes these choices:

1. Anything before the first ``diff --git`` line (a commit message, a
   ``format-patch`` header) is dropped. Nothing after the last file section is
   kept except the file section itself.
2. Every file section must carry an ``index <old>..<new>`` line with full
   object ids (40 or 64 hex digits); abbreviated ids are rejected because a
   3-way apply needs the exact preimage blob.
3. File sections are emitted in byte order of their path (old path, then new
   path); a path may appear in one section only.
4. Extended header lines are emitted in git's order: mode lines, similarity /
   rename / copy lines, ``index``. Paths are emitted with git's default
   quoting (``core.quotePath=true``: control bytes, ``"``, ``\\`` and bytes
   >= 0x80 as C escapes) and a tab after ``---``/``+++`` names containing a
   space (quoted or not), exactly as git writes them.
5. Hunk headers are ``@@ -a[,b] +c[,d] @@`` with the ",1" count omitted (as
   git does) and the section heading after the second ``@@`` removed: it
   depends on the diff driver of whoever ran git, not on the change.
6. Hunk bodies, ``\\ No newline at end of file`` markers and ``GIT binary
   patch`` blocks are kept byte for byte (including any CR). Hunk counts are
   checked against the body.
7. The result ends with exactly one newline. An empty diff canonicalizes to
   empty bytes.

``diff_digest`` is ``sha256:<hex>`` over the canonical bytes, so two diffs
that differ only in the points above have the same digest.

Hunk fingerprints ``dome-hunk-fp/v1``
-------------------------------------
One fingerprint per text hunk (and one per binary, mode-only, rename-only,
or whole-file section), with ``path``, ``base_ref``, ``base_context_digest``,
``edit_digest``, ``range_hint`` and ``fingerprint_version``. Normalization
(named by the version string): line endings CRLF/CR -> LF, trailing
whitespace (spaces and tabs) stripped, everything else significant.

- ``base_context_digest``: sha256 of the normalized preimage of the hunk
  (context and removed lines, in order).
- ``edit_digest``: sha256 of the normalized removed lines and added lines,
  each prefixed with its marker.
- ``range_hint``: ``{"start", "end"}`` 1-based inclusive preimage lines on
  the base; a pure insertion with no context gets the line it follows; binary,
  mode-only, creation and deletion sections carry no range_hint (the whole
  file) and ``kind: "file"`` instead of ``"hunk"``.
"""
from __future__ import annotations

import hashlib
import re
import zlib
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Sequence

from .errors import DomeError

DIFF_CANONICALIZATION = "git-binary-full-index/v1"
FINGERPRINT_VERSION = "dome-hunk-fp/v1;eol=lf;ws=rstrip-trailing;ctx=preimage"
DIFF_GIT_ARGS = ("diff", "--binary", "--full-index", "--no-color", "--no-ext-diff",
                 "--src-prefix=a/", "--dst-prefix=b/", "--no-renames")
"""The arguments a producer passes to git (after any `-c` options)."""

SUPPORTED_CANONICALIZATIONS = (DIFF_CANONICALIZATION,)

_OID = re.compile(rb"^[0-9a-f]{40}$|^[0-9a-f]{64}$")
_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
_MODE = re.compile(r"^[0-7]{6}$")


class DiffError(DomeError):
    """The diff cannot be parsed or canonicalized."""

    code = "DIFF_MALFORMED"


class UnsupportedCanonicalization(DiffError):
    code = "DIFF_CANONICALIZATION_UNSUPPORTED"


# ---------------------------------------------------------------------------
# data model


@dataclass(frozen=True)
class Hunk:
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    lines: tuple[bytes, ...]
    """Body lines without their trailing LF; each starts with ' ', '-', '+' or '\\'."""

    def preimage(self) -> list[bytes]:
        return [ln[1:] for ln in self.lines if ln[:1] in (b" ", b"-")]

    def postimage(self) -> list[bytes]:
        return [ln[1:] for ln in self.lines if ln[:1] in (b" ", b"+")]

    @property
    def added(self) -> int:
        return sum(1 for ln in self.lines if ln[:1] == b"+")

    @property
    def removed(self) -> int:
        return sum(1 for ln in self.lines if ln[:1] == b"-")


@dataclass(frozen=True)
class BinaryPatch:
    """A ``GIT binary patch`` block: forward and (optional) reverse parts."""

    lines: tuple[bytes, ...]
    """Lines after ``GIT binary patch`` up to the section end, verbatim."""

    def parts(self) -> list[tuple[str, int, list[bytes]]]:
        """[(kind 'literal'|'delta', declared size, base85 lines)] in order."""
        out: list[tuple[str, int, list[bytes]]] = []
        i = 0
        lines = self.lines
        while i < len(lines):
            head = lines[i]
            if not head:
                i += 1
                continue
            kind, _, size = head.partition(b" ")
            if kind not in (b"literal", b"delta") or not size.isdigit():
                raise DiffError("bad binary patch header", details={"line": head[:80].decode("latin-1")})
            i += 1
            data: list[bytes] = []
            while i < len(lines) and lines[i]:
                data.append(lines[i])
                i += 1
            out.append((kind.decode(), int(size), data))
        return out

    @property
    def declared_sizes(self) -> list[int]:
        return [size for _, size, _ in self.parts()]

    @property
    def forward_size(self) -> int:
        parts = self.parts()
        return parts[0][1] if parts else 0


@dataclass(frozen=True)
class FilePatch:
    old_path: str | None
    """None when the file is created (``/dev/null``)."""
    new_path: str | None
    """None when the file is deleted."""
    old_mode: str | None = None
    new_mode: str | None = None
    old_oid: str = ""
    new_oid: str = ""
    similarity: int | None = None
    copy: bool = False
    hunks: tuple[Hunk, ...] = ()
    binary: BinaryPatch | None = None
    binary_no_data: bool = False

    @property
    def path(self) -> str:
        """The path this section is known by on the base (old path, else new)."""
        return self.old_path if self.old_path is not None else self.new_path  # type: ignore[return-value]

    @property
    def is_new(self) -> bool:
        return self.old_path is None

    @property
    def is_deleted(self) -> bool:
        return self.new_path is None

    @property
    def is_rename(self) -> bool:
        return (self.old_path is not None and self.new_path is not None
                and self.old_path != self.new_path)

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(sorted({p for p in (self.old_path, self.new_path) if p is not None}))

    @property
    def mode_changed(self) -> bool:
        return (self.old_mode is not None and self.new_mode is not None
                and self.old_mode != self.new_mode)

    @property
    def result_mode(self) -> str | None:
        """The file mode after the patch when the patch states it."""
        return self.new_mode

    def sort_key(self) -> tuple[bytes, bytes]:
        enc = lambda p: (p or "").encode("utf-8", "surrogateescape")  # noqa: E731
        return (enc(self.path), enc(self.new_path))


@dataclass(frozen=True)
class ParsedDiff:
    files: tuple[FilePatch, ...] = field(default_factory=tuple)

    def touched_files(self) -> list[str]:
        return sorted({p for f in self.files for p in f.paths})


# ---------------------------------------------------------------------------
# path quoting (git's quote_c_style with core.quotePath=true)

_ESC = {b"\a"[0]: b"a", b"\b"[0]: b"b", b"\t"[0]: b"t", b"\n"[0]: b"n",
        b"\v"[0]: b"v", b"\f"[0]: b"f", b"\r"[0]: b"r", b'"'[0]: b'"', b"\\"[0]: b"\\"}
_UNESC = {v[0]: bytes([k]) for k, v in _ESC.items()}


def _needs_quote(raw: bytes) -> bool:
    return any(b < 0x20 or b == 0x7F or b >= 0x80 or b in (0x22, 0x5C) for b in raw)


def quote_path(path: str) -> bytes:
    raw = path.encode("utf-8", "surrogateescape")
    if not _needs_quote(raw):
        return raw
    out = bytearray(b'"')
    for b in raw:
        if b in _ESC:
            out += b"\\" + _ESC[b]
        elif b < 0x20 or b >= 0x7F:
            out += b"\\%03o" % b
        else:
            out.append(b)
    out += b'"'
    return bytes(out)


def _unquote(data: bytes, pos: int) -> tuple[bytes, int]:
    """Parse a C-quoted string starting at data[pos] == '"'; return (raw, end)."""
    assert data[pos:pos + 1] == b'"'
    out = bytearray()
    i = pos + 1
    while i < len(data):
        c = data[i]
        if c == 0x22:
            return bytes(out), i + 1
        if c == 0x5C:
            if i + 1 >= len(data):
                break
            n = data[i + 1]
            if n in _UNESC:
                out += _UNESC[n]
                i += 2
            elif 0x30 <= n <= 0x37:
                octal = data[i + 1:i + 4]
                if len(octal) != 3 or any(not 0x30 <= x <= 0x37 for x in octal):
                    raise DiffError("bad octal escape in quoted path")
                out.append(int(octal, 8) & 0xFF)
                i += 4
            else:
                raise DiffError("bad escape in quoted path")
        else:
            out.append(c)
            i += 1
    raise DiffError("unterminated quoted path")


def _decode_path(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _strip_prefix(raw: bytes, prefix: bytes) -> str:
    if not raw.startswith(prefix):
        raise DiffError(f"path does not start with {prefix.decode()!r}",
                        details={"path": raw[:200].decode("utf-8", "replace")},
                        hints=["produce the diff with --src-prefix=a/ --dst-prefix=b/"])
    return _decode_path(raw[len(prefix):])


def _parse_name(field_bytes: bytes, prefix: bytes) -> str | None:
    """A ---/+++ or rename name: quoted or bare, /dev/null -> None."""
    if field_bytes.startswith(b'"'):
        raw, end = _unquote(field_bytes, 0)
        rest = field_bytes[end:]
        if rest not in (b"", b"\t"):
            raise DiffError("trailing bytes after quoted path")
    else:
        raw = field_bytes[:-1] if field_bytes.endswith(b"\t") else field_bytes
    if raw == b"/dev/null":
        return None
    return _strip_prefix(raw, prefix) if prefix else _decode_path(raw)


def _parse_git_line(rest: bytes) -> tuple[str, str]:
    """The two paths of ``diff --git <a> <b>``."""
    if rest.startswith(b'"'):
        a_raw, end = _unquote(rest, 0)
        if rest[end:end + 1] != b" ":
            raise DiffError("malformed diff --git line")
        tail = rest[end + 1:]
        b_raw = _unquote(tail, 0)[0] if tail.startswith(b'"') else tail
        return _strip_prefix(a_raw, b"a/"), _strip_prefix(b_raw, b"b/")
    if rest.endswith(b'"'):
        idx = rest.find(b' "')
        if idx < 0:
            raise DiffError("malformed diff --git line")
        b_raw, _ = _unquote(rest, idx + 1)
        return _strip_prefix(rest[:idx], b"a/"), _strip_prefix(b_raw, b"b/")
    # unquoted on both sides: same name twice (no renames without headers)
    if (len(rest) - 3) % 2 == 0:
        half = (len(rest) - 3) // 2
        a_raw, sep, b_raw = rest[:half + 2], rest[half + 2:half + 3], rest[half + 3:]
        if sep == b" " and a_raw[2:] == b_raw[2:]:
            return _strip_prefix(a_raw, b"a/"), _strip_prefix(b_raw, b"b/")
    parts = rest.split(b" b/")
    if len(parts) == 2:
        return _strip_prefix(parts[0], b"a/"), _decode_path(parts[1])
    raise DiffError("ambiguous diff --git line", details={"line": rest[:200].decode("utf-8", "replace")})


# ---------------------------------------------------------------------------
# parse


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
    n = len(lines)
    a_path, b_path = _parse_git_line(lines[i][len(b"diff --git "):])
    i += 1
    hdr: dict[str, Any] = {}
    old_name: str | None | bool = False  # False = not given
    new_name: str | None | bool = False
    while i < n:
        ln = lines[i]
        if ln.startswith(b"diff --git ") or ln.startswith(b"@@ ") or ln == b"GIT binary patch" \
                or ln.startswith(b"Binary files "):
            break
        if ln.startswith(b"--- "):
            old_name = _parse_name(ln[4:], b"a/")
        elif ln.startswith(b"+++ "):
            new_name = _parse_name(ln[4:], b"b/")
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
            hdr["src"] = _parse_name(ln.split(b" ", 2)[2], b"")
            hdr["copy"] = ln.startswith(b"copy")
        elif ln.startswith(b"rename to ") or ln.startswith(b"copy to "):
            hdr["dst"] = _parse_name(ln.split(b" ", 2)[2], b"")
        elif ln.startswith(b"index "):
            spec = ln[6:].split(b" ")
            oids = spec[0].split(b"..")
            if len(oids) != 2 or not all(_OID.match(o) for o in oids):
                raise DiffError("index line without full object ids",
                                code="DIFF_NOT_FULL_INDEX",
                                details={"line": ln[:120].decode("latin-1")},
                                hints=["produce the diff with git diff --binary --full-index"])
            hdr["old_oid"], hdr["new_oid"] = oids[0].decode(), oids[1].decode()
            if len(spec) == 2:
                hdr["old_mode"] = hdr["new_mode"] = spec[1].decode("ascii", "replace")
            elif len(spec) > 2:
                raise DiffError("bad index line")
        else:
            raise DiffError("unknown extended header line",
                            details={"line": ln[:120].decode("utf-8", "replace")})
        i += 1

    old_path: str | None = a_path
    new_path: str | None = b_path
    if "src" in hdr or "dst" in hdr:
        old_path, new_path = hdr.get("src", a_path), hdr.get("dst", b_path)
    if hdr.get("created"):
        old_path = None
    if hdr.get("deleted"):
        new_path = None
    if old_name is not False and old_name != old_path:
        raise DiffError("--- name disagrees with the diff --git line", details={"path": a_path})
    if new_name is not False and new_name != new_path:
        raise DiffError("+++ name disagrees with the diff --git line", details={"path": b_path})
    for key in ("old_mode", "new_mode"):
        if key in hdr and not _MODE.match(hdr[key]):
            raise DiffError(f"bad file mode {hdr[key]!r}", details={"mode": hdr[key]})

    hunks: list[Hunk] = []
    binary: BinaryPatch | None = None
    no_data = False
    if i < n and lines[i] == b"GIT binary patch":
        i += 1
        start = i
        while i < n and not lines[i].startswith(b"diff --git "):
            i += 1
        body = tuple(lines[start:i])
        while body and body[-1] == b"":
            body = body[:-1]
        binary = BinaryPatch(body)
        binary.parts()  # validates headers
    elif i < n and lines[i].startswith(b"Binary files "):
        raise DiffError("binary change without data", code="DIFF_BINARY_WITHOUT_DATA",
                        details={"path": b_path},
                        hints=["produce the diff with git diff --binary --full-index"])
    else:
        while i < n and lines[i].startswith(b"@@ "):
            hunk, i = _parse_hunk(lines, i)
            hunks.append(hunk)
        if i < n and not lines[i].startswith(b"diff --git "):
            raise DiffError("unexpected line after hunks",
                            details={"line": lines[i][:120].decode("utf-8", "replace")})
    if (hunks or binary) and "old_oid" not in hdr:
        raise DiffError("file section has content but no index line",
                        code="DIFF_NOT_FULL_INDEX",
                        hints=["produce the diff with git diff --binary --full-index"])
    if hunks and (old_name is False or new_name is False):
        raise DiffError("text hunks without ---/+++ lines")
    return FilePatch(
        old_path=old_path, new_path=new_path,
        old_mode=hdr.get("old_mode"), new_mode=hdr.get("new_mode"),
        old_oid=hdr.get("old_oid", ""), new_oid=hdr.get("new_oid", ""),
        similarity=hdr.get("similarity"), copy=bool(hdr.get("copy")),
        hunks=tuple(hunks), binary=binary, binary_no_data=no_data,
    ), i


def _parse_hunk(lines: list[bytes], i: int) -> tuple[Hunk, int]:
    m = _HUNK.match(lines[i])
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


# ---------------------------------------------------------------------------
# serialize


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


# ---------------------------------------------------------------------------
# canonical form and digests


def _check_canonicalization(name: str) -> None:
    if name not in SUPPORTED_CANONICALIZATIONS:
        raise UnsupportedCanonicalization(
            f"unknown diff canonicalization {name!r}",
            details={"canonicalization": name, "supported": list(SUPPORTED_CANONICALIZATIONS)})


def canonicalize_diff(diff: bytes | str, canonicalization: str = DIFF_CANONICALIZATION) -> bytes:
    """The canonical bytes of a diff under `canonicalization`."""
    _check_canonicalization(canonicalization)
    return serialize_diff(parse_diff(diff))


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def diff_digest(diff: bytes | str, canonicalization: str = DIFF_CANONICALIZATION) -> str:
    """sha256 of the canonical form ("sha256:<hex>")."""
    return _sha(canonicalize_diff(diff, canonicalization))


def touched_files(diff: bytes | str | ParsedDiff) -> list[str]:
    parsed = diff if isinstance(diff, ParsedDiff) else parse_diff(diff)
    return parsed.touched_files()


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
        "diff_digest": _sha(canonical),
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


# ---------------------------------------------------------------------------
# subsets (used by guarded splits)


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


def binary_literal_size(patch: BinaryPatch, limit: int) -> int:
    """Inflate the forward literal with a hard cap; return its real size.

    Raises DiffError when the data inflates past `limit` or disagrees with
    the declared size (the cap keeps a zip bomb from costing memory)."""
    parts = patch.parts()
    if not parts or parts[0][0] != "literal":
        return parts[0][1] if parts else 0
    _, declared, data = parts[0]
    raw = bytearray()
    for line in data:
        if not line:
            continue
        n = line[0]
        length = n - ord("A") + 1 if n <= ord("Z") else n - ord("a") + 27
        raw += _b85decode(line[1:])[:length]
    d = zlib.decompressobj()
    out = d.decompress(bytes(raw), limit + 1)
    if len(out) > limit:
        raise DiffError("binary literal inflates past the size limit", code="DIFF_BINARY_TOO_LARGE",
                        details={"limit": limit})
    if len(out) != declared:
        raise DiffError("binary literal size disagrees with its header",
                        details={"declared": declared, "actual": len(out)})
    return len(out)


_B85 = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
_B85_INDEX = {c: i for i, c in enumerate(_B85)}


def _b85decode(data: bytes) -> bytes:
    if len(data) % 5:
        raise DiffError("bad base85 line length")
    out = bytearray()
    for k in range(0, len(data), 5):
        acc = 0
        for c in data[k:k + 5]:
            if c not in _B85_INDEX:
                raise DiffError("bad base85 character")
            acc = acc * 85 + _B85_INDEX[c]
        if acc > 0xFFFFFFFF:
            raise DiffError("base85 overflow")
        out += acc.to_bytes(4, "big")
    return bytes(out)


# ---------------------------------------------------------------------------
# strict in-memory application (the fast path of apply-check and the canvas)


class PatchDoesNotApply(DiffError):
    code = "DIFF_DOES_NOT_APPLY"


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


def binary_literal(fp: FilePatch, limit: int) -> bytes:
    """The postimage of a `literal` binary patch (capped inflation)."""
    assert fp.binary is not None
    parts = fp.binary.parts()
    if not parts or parts[0][0] != "literal":
        raise PatchDoesNotApply("delta binary patches need git", details={"path": fp.path})
    _, declared, data = parts[0]
    raw = bytearray()
    for line in data:
        n = line[0]
        length = n - ord("A") + 1 if n <= ord("Z") else n - ord("a") + 27
        raw += _b85decode(line[1:])[:length]
    out = zlib.decompressobj().decompress(bytes(raw), limit + 1)
    if len(out) > limit or len(out) != declared:
        raise DiffError("binary literal size is wrong or over the limit", code="DIFF_BINARY_TOO_LARGE",
                        details={"path": fp.path, "declared": declared, "limit": limit})
    return out
