"""Path quoting as git writes it (quote_c_style, core.quotePath=true) and the
names of `diff --git`, `---`/`+++` and rename lines."""
from __future__ import annotations

from .model import DiffError


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


def unquote(data: bytes, pos: int) -> tuple[bytes, int]:
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


def parse_name(field_bytes: bytes, prefix: bytes) -> str | None:
    """A ---/+++ or rename name: quoted or bare, /dev/null -> None."""
    if field_bytes.startswith(b'"'):
        raw, end = unquote(field_bytes, 0)
        rest = field_bytes[end:]
        if rest not in (b"", b"\t"):
            raise DiffError("trailing bytes after quoted path")
    else:
        raw = field_bytes[:-1] if field_bytes.endswith(b"\t") else field_bytes
    if raw == b"/dev/null":
        return None
    return _strip_prefix(raw, prefix) if prefix else _decode_path(raw)


def parse_git_line(rest: bytes) -> tuple[str, str]:
    """The two paths of ``diff --git <a> <b>``."""
    if rest.startswith(b'"'):
        a_raw, end = unquote(rest, 0)
        if rest[end:end + 1] != b" ":
            raise DiffError("malformed diff --git line")
        tail = rest[end + 1:]
        b_raw = unquote(tail, 0)[0] if tail.startswith(b'"') else tail
        return _strip_prefix(a_raw, b"a/"), _strip_prefix(b_raw, b"b/")
    if rest.endswith(b'"'):
        idx = rest.find(b' "')
        if idx < 0:
            raise DiffError("malformed diff --git line")
        b_raw, _ = unquote(rest, idx + 1)
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
