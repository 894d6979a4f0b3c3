"""Content-addressed blob store under ops/blobs/ (diffs, logs, images, masks).

Blobs are named by "sha256:<hex>" and stored at blobs/sha256/<hex[:2]>/<hex>.
Writes are atomic (temporary file, fsync, rename); every read re-hashes the
bytes and refuses them if they no longer match their name.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from registry.canonical import digest_bytes, parse_digest
from registry.errors import CanonicalizationError

from .errors import BlobCorrupt, BlobNotFound, InvalidEvent


class BlobStore:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def path(self, digest: str) -> Path:
        try:
            algo, hexpart = parse_digest(digest)
        except CanonicalizationError as exc:
            raise InvalidEvent(f"not a blob digest: {digest!r}", details={"digest": digest}) from exc
        return self.root / algo / hexpart[:2] / hexpart

    def put(self, data: bytes) -> str:
        digest = digest_bytes(bytes(data))
        target = self.path(digest)
        if target.is_file():
            return digest
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o444)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return digest

    def get(self, digest: str) -> bytes:
        target = self.path(digest)
        try:
            data = target.read_bytes()
        except FileNotFoundError:
            raise BlobNotFound(f"no blob {digest}", details={"digest": digest}) from None
        actual = digest_bytes(data)
        if actual != digest:
            raise BlobCorrupt(f"blob {digest} is corrupt: its bytes hash to {actual}",
                              details={"digest": digest, "actual": actual, "path": str(target)},
                              hints=["restore the blob from a copy; the ledger keeps only its digest"])
        return data
