"""The worker's checkout and diff with fewer git processes: the git directories are written
directly, and the diff starts from the index the checkout wrote (read before the action ran)
instead of a `read-tree`. The diff is the same bytes either way, and an edit that keeps a
file's size within the checkout's second is still seen."""
from __future__ import annotations

import os
import time
from pathlib import Path

from tests.conftest import git
from worker_sdk.proposal import canonical_worktree_diff
from worker_sdk.runtime import checkout


def _checkout(git_repo: Path, tmp_path: Path) -> tuple[Path, str, tuple[bytes, int]]:
    sha = git(git_repo, "rev-parse", "HEAD")
    scratch = tmp_path / "scratch" / "repo"
    index = checkout(git_repo / ".git", scratch, sha, git(git_repo, "rev-parse", "HEAD^{tree}"))
    assert not (scratch / ".git" / "hooks").exists()  # no template
    assert git(scratch, "status", "--porcelain") == ""
    return scratch, sha, index


def test_the_diff_from_the_checkouts_index_is_the_read_tree_diff(git_repo: Path, tmp_path: Path) -> None:
    scratch, sha, index = _checkout(git_repo, tmp_path)
    files = sorted(p for p in scratch.rglob("*") if p.is_file() and ".git" not in p.parts)
    files[0].write_text(files[0].read_text() + "more\n")  # modified
    files[-1].unlink()  # deleted
    (scratch / "new" / "deep").mkdir(parents=True)
    (scratch / "new" / "deep" / "n.bin").write_bytes(bytes(range(256)))  # new, binary
    (scratch / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(scratch / "run.sh", 0o755)
    fast = canonical_worktree_diff(scratch, sha, base_index=index)
    assert fast == canonical_worktree_diff(scratch, sha)  # the read-tree path, from scratch
    assert b"new/deep/n.bin" in fast and b"run.sh" in fast and b"deleted file mode" in fast


def test_a_same_size_edit_in_the_checkouts_second_is_seen(git_repo: Path, tmp_path: Path) -> None:
    scratch, sha, index = _checkout(git_repo, tmp_path)
    target = next(p for p in sorted(scratch.rglob("*")) if p.is_file() and ".git" not in p.parts)
    before = target.stat()
    with open(target, "r+b") as f:  # in place: same inode, same size
        first = f.read(1)
        f.seek(0)
        f.write(b"Z" if first != b"Z" else b"Y")
    after = target.stat()
    assert (after.st_ino, after.st_size) == (before.st_ino, before.st_size)
    time.sleep(1.1)  # the diff's index is written in a later second than the edit
    diff = canonical_worktree_diff(scratch, sha, base_index=index)
    assert target.name.encode() in diff
