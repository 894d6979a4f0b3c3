"""A base commit's files in one file: what a worker checks out without starting git.

The coordinator writes one per base commit of a run, inside the run's read-only base repository
(`<base.git>/dome-snapshots/<commit>`); a worker reads it in one go and writes the files (and the
index git would have written) itself. Layout: one line of canonical JSON
`{"commit", "tree", "entries": [[path, mode, blob_id, size], ...]}`, a newline, then every blob's
bytes in entry order. Entries are sorted by path bytes (the index's order); only regular files
(100644, 100755) and symbolic links (120000) appear: a commit with anything else gets no snapshot.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import NamedTuple

from .canonical import canonical_json
from .errors import DomeError

MAGIC = b"dome.base_snapshot/v1\n"
SUBDIR = "dome-snapshots"
MODES = ("100644", "100755", "120000")


class SnapshotInvalid(DomeError):
    code = "BASE_SNAPSHOT_INVALID"


class Entry(NamedTuple):  # a tuple, not a frozen dataclass: a worker builds one per file at its start
    path: str
    mode: str
    oid: str
    data: bytes


@dataclass(frozen=True)
class Snapshot:
    commit: str
    tree: str
    entries: tuple[Entry, ...]


def encode(commit: str, tree: str, entries: list[tuple[str, str, str, bytes]]) -> bytes:
    """The file's bytes. `entries`: (path, mode, blob id, content), any order."""
    rows = sorted(entries, key=lambda e: e[0].encode())
    for path, mode, _oid, _data in rows:
        if mode not in MODES:
            raise SnapshotInvalid(f"{path}: mode {mode} has no place in a snapshot", details={"path": path})
    head = canonical_json({"commit": commit, "tree": tree,
                           "entries": [[p, m, o, len(d)] for p, m, o, d in rows]})
    return MAGIC + head + b"\n" + b"".join(d for *_rest, d in rows)


def decode(data: bytes) -> Snapshot:
    if not data.startswith(MAGIC):
        raise SnapshotInvalid("not a base snapshot")
    end = data.index(b"\n", len(MAGIC))
    head = json.loads(data[len(MAGIC):end])
    pos = end + 1
    out = []
    for path, mode, oid, size in head["entries"]:
        out.append(Entry(path, mode, oid, data[pos:pos + size]))
        pos += size
    if pos != len(data):
        raise SnapshotInvalid("the snapshot's length does not match its entries")
    return Snapshot(head["commit"], head["tree"], tuple(out))
