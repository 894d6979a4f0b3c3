"""Content-addressed blob store under ops/blobs/ (diffs, logs, images, masks).

Blobs are named by "sha256:<hex>" and stored at blobs/sha256/<hex[0]>/<hex>:
sixteen fan-out directories, made once per store rather than one for nearly
every new blob. A store written before this layout keeps its blobs at
blobs/sha256/<hex[:2]>/<hex>; they are read (and count as stored) where they
are, and never copied. Writes are atomic (temporary file, fsync, rename);
every read re-hashes the bytes and refuses them if they no longer match
their name.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from registry.canonical import digest_bytes, parse_digest
from registry.errors import CanonicalizationError

from .errors import BlobCorrupt, BlobNotFound, InvalidEvent

FANOUT = 1  # hex digits naming a blob's directory (16 directories)
OLD_FANOUT = 2  # the earlier layout (256 directories), still read


class BlobStore:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def _paths(self, digest: str) -> tuple[Path, Path]:
        """(where a new blob goes, where the earlier layout kept it)."""
        try:
            algo, hexpart = parse_digest(digest)
        except CanonicalizationError as exc:
            raise InvalidEvent(f"not a blob digest: {digest!r}", details={"digest": digest}) from exc
        base = self.root / algo
        return base / hexpart[:FANOUT] / hexpart, base / hexpart[:OLD_FANOUT] / hexpart

    def path(self, digest: str) -> Path:
        """The blob's file: where it is stored, or where `put` would store it."""
        new, old = self._paths(digest)
        return old if not new.is_file() and old.is_file() else new

    def put(self, data: bytes) -> str:
        digest = digest_bytes(bytes(data))
        target, old = self._paths(digest)
        if target.is_file() or old.is_file():
            return digest
        try:
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        except FileNotFoundError:  # the first blob of its fan-out directory
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
        target, old = self._paths(digest)
        try:
            data = target.read_bytes()
        except FileNotFoundError:
            try:
                data, target = old.read_bytes(), old
            except FileNotFoundError:
                raise BlobNotFound(f"no blob {digest}", details={"digest": digest}) from None
        actual = digest_bytes(data)
        if actual != digest:
            raise BlobCorrupt(f"blob {digest} is corrupt: its bytes hash to {actual}",
                              details={"digest": digest, "actual": actual, "path": str(target)},
                              hints=["restore the blob from a copy; the ledger keeps only its digest"])
        return data
