"""`GIT binary patch` literals: base85, capped inflation (a zip bomb costs no memory)."""
from __future__ import annotations

import zlib

from .model import BinaryPatch, DiffError, FilePatch, PatchDoesNotApply


_B85 = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
_B85_INDEX = {c: i for i, c in enumerate(_B85)}


def b85decode(data: bytes) -> bytes:
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


def _inflate_literal(data: list[bytes], limit: int) -> bytes:
    """Decode the base85 lines of a literal and inflate at most limit + 1 bytes."""
    raw = bytearray()
    for line in data:
        if not line:
            continue
        n = line[0]
        length = n - ord("A") + 1 if n <= ord("Z") else n - ord("a") + 27
        raw += b85decode(line[1:])[:length]
    return zlib.decompressobj().decompress(bytes(raw), limit + 1)


def binary_literal_size(patch: BinaryPatch, limit: int) -> int:
    """Inflate the forward literal with a hard cap; return its real size.

    Raises DiffError when the data inflates past `limit` or disagrees with
    the declared size (the cap keeps a zip bomb from costing memory)."""
    parts = patch.parts()
    if not parts or parts[0][0] != "literal":
        return parts[0][1] if parts else 0
    _, declared, data = parts[0]
    out = _inflate_literal(data, limit)
    if len(out) > limit:
        raise DiffError("binary literal inflates past the size limit", code="DIFF_BINARY_TOO_LARGE",
                        details={"limit": limit})
    if len(out) != declared:
        raise DiffError("binary literal size disagrees with its header",
                        details={"declared": declared, "actual": len(out)})
    return len(out)


def binary_literal(fp: FilePatch, limit: int) -> bytes:
    """The postimage of a `literal` binary patch (capped inflation)."""
    assert fp.binary is not None
    parts = fp.binary.parts()
    if not parts or parts[0][0] != "literal":
        raise PatchDoesNotApply("delta binary patches need git", details={"path": fp.path})
    _, declared, data = parts[0]
    out = _inflate_literal(data, limit)
    if len(out) > limit or len(out) != declared:
        raise DiffError("binary literal size is wrong or over the limit", code="DIFF_BINARY_TOO_LARGE",
                        details={"path": fp.path, "declared": declared, "limit": limit})
    return out
