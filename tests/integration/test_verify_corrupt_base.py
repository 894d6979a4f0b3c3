"""`dome verify` on a repository whose base objects are damaged: the object that no longer
hashes to its id (or that git cannot read at all) is named by a failed check, and verify
never stops with a traceback. The run's own new objects are covered by test_promotion.py."""
from __future__ import annotations

import os
import zlib
from pathlib import Path
from typing import Callable

import pytest

from coordinator.integration import gitio
from coordinator.integration.verify import CheckKind, verify_run
from tests.conftest import git
from tests.integration.test_promotion import verified_run  # noqa: F401  (the fixture)


def _loose(repo: Path, oid: str) -> Path:
    path = repo / ".git" / "objects" / oid[:2] / oid[2:]
    assert path.is_file(), "the base's objects are loose in big_repo"
    os.chmod(path, 0o644)
    return path


def _rewrite(repo: Path, oid: str, change: Callable[[bytes], bytes]) -> None:
    """A well-formed object of the same type under the old name, with other content:
    git reads it without complaint, only re-hashing tells."""
    path = _loose(repo, oid)
    header, _, body = zlib.decompress(path.read_bytes()).partition(b"\0")
    new = change(body)
    assert new != body
    path.write_bytes(zlib.compress(header.split(b" ")[0] + b" %d\0" % len(new) + new))


def _garble(repo: Path, oid: str) -> None:
    """A loose object one byte longer than its header says: git cat-file dies on a commit or
    tree like it, and streams a blob like it past the size it announced."""
    path = _loose(repo, oid)
    path.write_bytes(zlib.compress(zlib.decompress(path.read_bytes()) + b"x"))


def _failures(rep) -> list[tuple[str, str, str | None]]:
    return [(f.kind.value, f.detail, f.subject) for f in rep.failures]


def test_a_base_commit_that_no_longer_hashes_to_its_id_is_named(verified_run) -> None:  # noqa: F811
    """The commits the chain is judged on are read with re-hashing: a base commit changed
    in place fails the git-objects check, naming it, before anything trusts its content."""
    repo, res, ledger, keyring = verified_run
    _rewrite(repo, res.base_ref, lambda b: b.replace(b"\n\nbase", b"\n\nBASE"))
    assert git(repo, "cat-file", "-p", res.base_ref)  # git itself reads it without complaint
    rep = verify_run(ledger, "run-1", keyring)
    assert not rep.valid
    assert _failures(rep) == [("git_objects", f"GIT_OBJECT_CORRUPT: object {res.base_ref} does not hash to its id",
                               res.base_ref)], rep.reasons()


def test_a_base_blob_the_replay_reads_that_no_longer_hashes_is_named(verified_run) -> None:  # noqa: F811
    """The replay reads the base's blobs with re-hashing: a changed base blob under a layer's
    diff fails the re-apply for that layer, naming the object, rather than a tree that differs."""
    repo, res, ledger, keyring = verified_run
    oid = git(repo, "rev-parse", f"{res.base_ref}:f01.txt")
    _rewrite(repo, oid, lambda b: b.replace(b"file 1 line 30\n", b"file 1 line 3O\n"))
    rep = verify_run(ledger, "run-1", keyring)
    assert not rep.valid
    assert _failures(rep) == [("reapply", "diff no longer applies to its parent; "
                               f"f01.txt: GIT_OBJECT_CORRUPT: object {oid} does not hash to its id", "p1")], \
        rep.reasons()


def test_a_base_commit_git_cannot_read_is_named_not_a_crash(verified_run) -> None:  # noqa: F811
    """A base commit that does not inflate kills git cat-file: the reader says which object,
    every later read says the reader stopped, and verify reports instead of raising."""
    repo, res, ledger, keyring = verified_run
    _garble(repo, res.base_ref)
    rep = verify_run(ledger, "run-1", keyring)
    assert not rep.valid
    assert ("git_objects", f"GIT_OBJECT_CORRUPT: object {res.base_ref} unreadable (git cat-file died reading it)",
            res.base_ref) in _failures(rep), rep.reasons()


def test_a_base_tree_git_cannot_read_fails_the_replay_not_verify(verified_run) -> None:  # noqa: F811
    """No canvas can be built on a base whose tree cannot be read: the replay fails, naming
    the base; verify still runs its other checks and returns."""
    repo, res, ledger, keyring = verified_run
    _garble(repo, git(repo, "rev-parse", f"{res.base_ref}^{{tree}}"))
    rep = verify_run(ledger, "run-1", keyring)
    assert not rep.valid
    replay = [f for f in _failures(rep) if f[0] == "replay"]
    assert replay == [("replay", f"CANVAS_BASE_UNKNOWN: base {res.base_ref} is not a commit", res.base_ref)], \
        rep.reasons()
    assert CheckKind.TARGET_REF not in rep.failed_kinds()


def test_a_reader_that_git_stopped_on_raises_typed_errors_after(big_repo: Path) -> None:
    """The object git died on is named as corrupt; each read after it is refused as
    GIT_READER_STOPPED (naming that object), not a broken pipe."""
    base = git(big_repo, "rev-parse", "HEAD")
    blob = git(big_repo, "rev-parse", "HEAD:f02.txt")
    _garble(big_repo, git(big_repo, "rev-parse", "HEAD:f01.txt"))
    bad = git(big_repo, "rev-parse", "HEAD:f01.txt")
    with gitio.ObjectReader(big_repo) as reader:
        assert reader.read(base)[0] == "commit"
        with pytest.raises(gitio.GitObjectCorrupt) as first:
            reader.read(bad)
        assert (first.value.code, first.value.details["oid"]) == ("GIT_OBJECT_CORRUPT", bad)
        for _ in range(2):
            with pytest.raises(gitio.GitReaderStopped) as later:
                reader.read(blob)
            assert (later.value.code, later.value.details) == ("GIT_READER_STOPPED",
                                                              {"oid": blob, "stopped_at": bad})
        assert reader.read(base)[0] == "commit"  # what was read before is still served
    with gitio.ObjectReader(big_repo) as reader:
        assert gitio.commit_facts(reader, ["0" * 40, base]).keys() == {base}  # a missing one is skipped
        with pytest.raises(gitio.GitObjectCorrupt) as not_skipped:
            gitio.commit_facts(reader, [bad, base])
        assert not_skipped.value.code == "GIT_OBJECT_CORRUPT"
