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
    index = checkout(git_repo / ".git", scratch, sha, git(git_repo, "rev-parse", "HEAD^{tree}")).index
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


# -- the checkout from the coordinator's snapshot and the diff without git ---------------------------

def _varied_repo(root: Path, extra: dict[str, bytes] | None = None) -> tuple[Path, str, str]:
    repo = root / "base"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    files = {"a.txt": b"one\ntwo\n", "empty": b"", "no-eol.txt": b"last line", "d/e/deep.txt": b"x\n" * 5,
             "d/run.sh": b"#!/bin/sh\necho hi\n", "z-1.txt": b"1\n", **(extra or {})}
    for name, data in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    os.chmod(repo / "d" / "run.sh", 0o755)
    os.symlink("a.txt", repo / "link")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo, git(repo, "rev-parse", "HEAD"), git(repo, "rev-parse", "HEAD^{tree}")


def _snapshot_checkout(tmp_path: Path, extra: dict[str, bytes] | None = None):
    from coordinator.runloop.snapshot import write_snapshot
    repo, sha, tree = _varied_repo(tmp_path, extra)
    assert write_snapshot(repo / ".git", sha) is not None
    scratch = tmp_path / "scratch" / "repo"
    base = checkout(repo / ".git", scratch, sha, tree)
    assert base.files is not None  # from the snapshot, not git
    return scratch, sha, base


def test_the_snapshot_checkout_is_what_git_checks_out(tmp_path: Path) -> None:
    scratch, sha, base = _snapshot_checkout(tmp_path)
    assert git(scratch, "status", "--porcelain") == ""  # index, HEAD and files agree for git itself
    assert git(scratch, "rev-parse", "HEAD") == sha
    assert git(scratch, "diff", "HEAD", "--stat") == ""
    assert os.readlink(scratch / "link") == "a.txt"
    assert os.stat(scratch / "d" / "run.sh").st_mode & 0o100
    assert git(scratch, "ls-files", "-s") == git(tmp_path / "base", "ls-files", "-s")


def _both(scratch: Path, sha: str, base) -> tuple[bytes | None, bytes]:
    from worker_sdk.checkout import quick_diff
    return quick_diff(scratch, base), canonical_worktree_diff(scratch, sha)


def test_added_and_deleted_files_diff_without_git_byte_for_byte(tmp_path: Path) -> None:
    scratch, sha, base = _snapshot_checkout(tmp_path)
    (scratch / "out" / "deep").mkdir(parents=True)
    for name, data in {"out/one.txt": b"1\n", "out/deep/many.txt": b"a\nb\r\nc\n", "out/noeol": b"x\ny",
                       "out/empty": b"", "0first.txt": b"\n", "d/e2.txt": b"new\n"}.items():
        (scratch / name).write_bytes(data)
    (scratch / "out" / "tool").write_bytes(b"#!/bin/sh\n")
    os.chmod(scratch / "out" / "tool", 0o755)
    (scratch / "a.txt").unlink()
    (scratch / "empty").unlink()
    (scratch / "no-eol.txt").unlink()
    (scratch / "d" / "e" / "deep.txt").unlink()
    (scratch / "emptydir").mkdir()  # git records no directories
    quick, slow = _both(scratch, sha, base)
    assert quick is not None and quick == slow
    assert b"deleted file mode" in quick and b"new file mode 100755" in quick and b"No newline" in quick


def test_an_unchanged_checkout_diffs_empty_without_git(tmp_path: Path) -> None:
    scratch, sha, base = _snapshot_checkout(tmp_path)
    (scratch / "a.txt").write_bytes(b"one\ntwo\n")  # rewritten, same content
    assert _both(scratch, sha, base) == (b"", b"")


def test_a_same_size_edit_right_after_the_snapshot_checkout_is_seen(tmp_path: Path) -> None:
    scratch, sha, base = _snapshot_checkout(tmp_path)
    with open(scratch / "a.txt", "r+b") as f:  # in place, same size, at once (no second passes)
        f.write(b"ONE")
    from worker_sdk.proposal import build_proposal
    raw = canonical_worktree_diff(scratch, sha, base_index=base.index)
    assert b"+ONE" in raw and raw == canonical_worktree_diff(scratch, sha)
    spawn = {"base_ref": sha, "base_tree_hash": "t", "run_id": "r", "wave_id": "w", "node_id": "n",
             "node_execution_id": "ne", "determinism_seed": 1, "inputs_hash": "h", "action_spec": {"intent": "command"}}
    built = build_proposal(scratch, spawn=spawn, profile={"profile_id": "p"}, base=base)
    assert built is not None and b"+ONE" in built[1]


def test_what_the_quick_diff_leaves_to_git_still_diffs_as_git_does(tmp_path: Path) -> None:
    from worker_sdk.checkout import quick_diff
    cases = {
        "edited": lambda s: (s / "a.txt").write_bytes(b"one\n2\n"),
        "binary": lambda s: (s / "b.bin").write_bytes(b"\0\1\2"),
        "mode": lambda s: os.chmod(s / "a.txt", 0o755),
        "symlink": lambda s: os.symlink("a.txt", s / "l2"),
        "link deleted": lambda s: (s / "link").unlink(),
        "quoted name": lambda s: (s / "sp ace.txt").write_bytes(b"x\n"),
        "ignore file": lambda s: (s / ".gitignore").write_bytes(b"*.log\n"),
        "nested repo": lambda s: ((s / "sub" / ".git").mkdir(parents=True), (s / "sub" / "f").write_bytes(b"1\n")),
        "file to dir": lambda s: ((s / "z-1.txt").unlink(), (s / "z-1.txt").mkdir(), (s / "z-1.txt" / "f").write_bytes(b"1\n")),
    }
    for i, (name, change) in enumerate(cases.items()):
        scratch, sha, base = _snapshot_checkout(tmp_path / str(i))
        change(scratch)
        assert quick_diff(scratch, base) is None, name
        raw = canonical_worktree_diff(scratch, sha, base_index=base.index)
        assert raw and raw == canonical_worktree_diff(scratch, sha), name


def test_a_base_with_an_ignore_file_is_left_to_git(tmp_path: Path) -> None:
    from worker_sdk.checkout import quick_diff
    scratch, sha, base = _snapshot_checkout(tmp_path, {".gitignore": b"*.log\n"})
    (scratch / "x.log").write_bytes(b"ignored\n")
    (scratch / "y.txt").write_bytes(b"kept\n")
    assert quick_diff(scratch, base) is None
    raw = canonical_worktree_diff(scratch, sha, base_index=base.index)
    assert b"y.txt" in raw and b"x.log" not in raw


def _forge_snapshot(repo: Path, sha: str, tree: str, entries) -> None:
    from registry.base_snapshot import SUBDIR, encode
    from worker_sdk.checkout import blob_id
    (repo / ".git" / SUBDIR).mkdir(exist_ok=True)
    (repo / ".git" / SUBDIR / sha).write_bytes(
        encode(sha, tree, [(p, "100644", blob_id(d), d) for p, d in entries]))


def test_a_snapshot_naming_a_path_outside_the_checkout_is_not_used(tmp_path: Path) -> None:
    import pytest

    from worker_sdk.runtime import WorkerStartError
    repo, sha, tree = _varied_repo(tmp_path)
    for i, bad in enumerate(("../escape.txt", ".git/hooks/post-checkout", "d/../../escape.txt", "/abs.txt")):
        _forge_snapshot(repo, sha, tree, [("a.txt", b"one\ntwo\n"), (bad, b"#!/bin/sh\n")])
        scratch = tmp_path / f"s{i}" / "inner" / "repo"
        base = checkout(repo / ".git", scratch, sha, tree)
        assert base.files is None, bad  # git's own checkout instead
        assert not (tmp_path / f"s{i}" / "inner" / "escape.txt").exists()
        assert not (tmp_path / f"s{i}" / "escape.txt").exists()
        assert not (scratch / ".git" / "hooks" / "post-checkout").exists()
    _forge_snapshot(repo, sha, "0" * 40, [("a.txt", b"one\ntwo\n")])
    with pytest.raises(WorkerStartError) as err:  # a snapshot of another tree is refused like git's
        checkout(repo / ".git", tmp_path / "t" / "repo", sha, tree)
    assert err.value.code == "BASE_TREE_MISMATCH"


def test_a_damaged_snapshot_falls_back_to_git(tmp_path: Path) -> None:
    from registry.base_snapshot import SUBDIR
    from coordinator.runloop.snapshot import write_snapshot
    repo, sha, tree = _varied_repo(tmp_path)
    path = write_snapshot(repo / ".git", sha)
    assert path == repo / ".git" / SUBDIR / sha
    path.write_bytes(path.read_bytes()[:-3])  # cut short
    base = checkout(repo / ".git", tmp_path / "s" / "repo", sha, tree)
    assert base.files is None and git(tmp_path / "s" / "repo", "status", "--porcelain") == ""
