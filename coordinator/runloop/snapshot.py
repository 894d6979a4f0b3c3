"""Write a base commit's snapshot into the run's base repository (`registry.base_snapshot`).

Once per base commit of a run (three git processes), so that no attempt needs a git process to
check the base out. A commit the snapshot cannot hold (a submodule, a path that is not UTF-8, more
than MAX_BYTES of content) gets none, and its attempts check out with git as before.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from registry.base_snapshot import MODES, SUBDIR, encode

MAX_BYTES = 64 << 20
GIT_TIMEOUT_S = 300


def _git(base_git: Path, *args: str, data: bytes | None = None) -> bytes:
    return subprocess.run(["git", "--git-dir", str(base_git), *args], input=data, capture_output=True,
                          check=True, timeout=GIT_TIMEOUT_S).stdout


def snapshot_path(base_git: Path, commit: str) -> Path:
    return base_git / SUBDIR / commit


def write_snapshot(base_git: Path, commit: str) -> Path | None:
    """The snapshot of `commit` (written now unless it exists), or None where it cannot hold it."""
    target = snapshot_path(base_git, commit)
    if target.is_file():
        return target
    try:
        tree = _git(base_git, "rev-parse", f"{commit}^{{tree}}").decode().strip()
        rows = [r for r in _git(base_git, "ls-tree", "-r", "-z", "--full-tree", commit).split(b"\0") if r]
        listed = []
        for row in rows:
            meta, path = row.split(b"\t", 1)
            mode, kind, oid = meta.decode().split(" ")
            if mode not in MODES or kind != "blob" or len(oid) != 40:
                return None
            listed.append((path.decode("utf-8"), mode, oid))
        out = _git(base_git, "cat-file", "--batch", data="".join(f"{o}\n" for _, _, o in listed).encode())
    except (subprocess.SubprocessError, UnicodeDecodeError, ValueError, OSError):
        return None
    entries, pos, total = [], 0, 0
    for path, mode, oid in listed:
        end = out.index(b"\n", pos)
        got_oid, kind, size = out[pos:end].decode().split(" ")
        if got_oid != oid or kind != "blob":
            return None
        pos = end + 1
        entries.append((path, mode, oid, out[pos:pos + int(size)]))
        pos += int(size) + 1
        total += int(size)
        if total > MAX_BYTES:
            return None
    target.parent.mkdir(exist_ok=True)
    tmp = target.with_name(f".{commit}.{os.getpid()}")
    tmp.write_bytes(encode(commit, tree, entries))
    os.replace(tmp, target)  # whole or absent: a worker never reads half a snapshot
    return target
