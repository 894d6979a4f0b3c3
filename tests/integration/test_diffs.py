"""registry/diffs.py: canonical form, digests, parsing and fingerprints."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry import diffs
from registry.diffs import (DIFF_CANONICALIZATION, DiffError, FilePatch, Hunk, ParsedDiff,
                            canonicalize_diff, diff_digest, hunk_fingerprints, parse_diff,
                            serialize_diff, touched_files)
from tests.conftest import git
from tests.integration.conftest import git_bytes, worktree_diff


def _mixed_change(repo: Path) -> bytes:
    (repo / "README.md").write_text("hello\nworld\n")
    (repo / "new dir").mkdir()
    (repo / "new dir" / "with space.txt").write_text("a\nb\n")
    (repo / "ünï\tcode.txt").write_bytes(b"x\r\ny\r\n")
    (repo / "blob.bin").write_bytes(bytes(range(256)) * 8)
    (repo / "noeol.txt").write_bytes(b"last line without newline")
    (repo / "tool.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(repo / "tool.sh", 0o755)
    return worktree_diff(repo)


def test_canonical_form_of_real_git_output_is_git_output(git_repo: Path) -> None:
    raw = _mixed_change(git_repo)
    canon = canonicalize_diff(raw)
    assert canon == raw  # git's own -U3 output with no section headings is already canonical
    assert canonicalize_diff(canon) == canon
    assert diff_digest(raw).startswith("sha256:") and len(diff_digest(raw)) == 71
    git_bytes(git_repo, "apply", "--check", "--index", input=canon)
    assert touched_files(raw) == sorted(["README.md", "blob.bin", "new dir/with space.txt",
                                         "noeol.txt", "tool.sh", "ünï\tcode.txt"])


def test_normalization_rules_are_digest_invariant(git_repo: Path) -> None:
    (git_repo / "a.py").write_text("".join(f"def f{i}():\n    return {i}\n" for i in range(30)))
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-qm", "py")
    text = (git_repo / "a.py").read_text().replace("return 20", "return -20")
    (git_repo / "a.py").write_text(text)
    raw = worktree_diff(git_repo)
    assert b"@@ def f" in raw  # git wrote a section heading
    canon = canonicalize_diff(raw)
    assert b"@@ def f" not in canon
    preamble = b"From 123 Mon Sep 17 00:00:00 2001\nSubject: x\n\n---\n"
    variants = [raw, preamble + raw, raw.rstrip(b"\n"), raw.decode()]
    assert {diff_digest(v) for v in variants} == {diff_digest(raw)}
    git_bytes(git_repo, "apply", "--check", input=canon)


def test_file_sections_are_sorted_and_duplicates_rejected(git_repo: Path) -> None:
    (git_repo / "b.txt").write_text("b\n")
    (git_repo / "a.txt").write_text("a\n")
    raw = worktree_diff(git_repo)
    sections = [b"diff --git" + s for s in raw.split(b"diff --git")[1:]]
    swapped = b"".join(reversed(sections))
    assert canonicalize_diff(swapped) == canonicalize_diff(raw)
    with pytest.raises(DiffError) as exc:
        parse_diff(raw + sections[0])
    assert exc.value.code == "DIFF_DUPLICATE_PATH"


def test_abbreviated_index_and_binary_without_data_rejected(git_repo: Path) -> None:
    (git_repo / "README.md").write_text("changed\n")
    (git_repo / "x.bin").write_bytes(b"\0\1\2")
    git(git_repo, "add", "-A")
    short = git_bytes(git_repo, "diff", "--cached", "HEAD", "--", "README.md")
    with pytest.raises(DiffError) as exc:
        parse_diff(short)
    assert exc.value.code == "DIFF_NOT_FULL_INDEX"
    nodata = git_bytes(git_repo, "diff", "--full-index", "--cached", "HEAD", "--", "x.bin")
    with pytest.raises(DiffError) as exc:
        parse_diff(nodata)
    assert exc.value.code == "DIFF_BINARY_WITHOUT_DATA"


def test_tampered_hunks_fail_to_parse_or_change_digest(git_repo: Path) -> None:
    (git_repo / "README.md").write_text("hello\nworld\n")
    raw = worktree_diff(git_repo)
    assert diff_digest(raw.replace(b"+world", b"+w0rld")) != diff_digest(raw)
    with pytest.raises(DiffError):
        parse_diff(raw + b"+extra line beyond the header count\n")
    with pytest.raises(diffs.UnsupportedCanonicalization):
        diff_digest(raw, "git-something/v9")


def test_hunk_fingerprints_are_stable_and_normalized(big_repo: Path) -> None:
    base = git(big_repo, "rev-parse", "HEAD")
    p = big_repo / "f03.txt"
    lines = p.read_text().splitlines(keepends=True)
    lines[10] = "changed\n"
    lines[40] = "changed too\n"
    p.write_text("".join(lines))
    raw = worktree_diff(big_repo)
    fps = hunk_fingerprints(raw, base)
    assert [f["range_hint"] for f in fps] == [{"start": 8, "end": 14}, {"start": 38, "end": 44}]
    assert all(f["path"] == "f03.txt" and f["base_ref"] == base
               and f["fingerprint_version"] == diffs.FINGERPRINT_VERSION for f in fps)
    # trailing whitespace and CRLF do not change the fingerprint
    crlf = raw.replace(b"+changed\n", b"+changed  \r\n")
    assert [f["edit_digest"] for f in hunk_fingerprints(crlf, base)] == [f["edit_digest"] for f in fps]
    assert hunk_fingerprints(raw, base) == fps


def test_select_keeps_single_hunks_applicable(big_repo: Path) -> None:
    p = big_repo / "f05.txt"
    lines = p.read_text().splitlines(keepends=True)
    lines[5:7] = ["x\n", "y\n", "z\n", "w\n"]
    lines[30] = ""
    lines[50] = "tail\n"
    p.write_text("".join(lines))
    raw = worktree_diff(big_repo)
    parsed = parse_diff(raw)
    assert len(parsed.files[0].hunks) == 3
    for keep in ([0], [1], [2], [0, 2], [1, 2]):
        sub = serialize_diff(diffs.select(parsed, [("f05.txt", k) for k in keep]))
        git_bytes(big_repo, "apply", "--check", input=sub)
        assert canonicalize_diff(sub) == sub


# ---------------------------------------------------------------------------
# property tests

_line = st.binary(max_size=12).filter(lambda b: b"\n" not in b)
_path = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="/\n\x00"),
                min_size=1, max_size=8).filter(lambda s: s not in (".", ".."))


@st.composite
def _hunks(draw: st.DrawFn) -> tuple[Hunk, ...]:
    out: list[Hunk] = []
    old = new = 1
    for _ in range(draw(st.integers(1, 3))):
        old += draw(st.integers(0, 5))
        body: list[bytes] = []
        for _ in range(draw(st.integers(1, 6))):
            tag = draw(st.sampled_from([b" ", b"-", b"+"]))
            body.append(tag + draw(_line))
        oc = sum(1 for b in body if b[:1] in b" -")
        nc = sum(1 for b in body if b[:1] in b" +")
        if oc == 0 or nc == 0:
            body.append(b" ctx")
            oc, nc = oc + 1, nc + 1
        new = old + (new - old)
        out.append(Hunk(old, oc, new, nc, tuple(body)))
        new += nc
        old += oc
    return tuple(out)


@st.composite
def _parsed(draw: st.DrawFn) -> ParsedDiff:
    files = []
    for path in draw(st.lists(_path, min_size=1, max_size=4, unique=True)):
        oid = draw(st.sampled_from(["1" * 40, "a" * 40, "b" * 64]))
        files.append(FilePatch(old_path=path, new_path=path, old_mode="100644",
                               new_mode="100644", old_oid=oid, new_oid="c" * len(oid),
                               hunks=draw(_hunks())))
    return ParsedDiff(tuple(sorted(files, key=FilePatch.sort_key)))


@settings(max_examples=150, deadline=None)
@given(_parsed())
def test_property_serialize_parse_round_trip(parsed: ParsedDiff) -> None:
    text = serialize_diff(parsed)
    again = parse_diff(text)
    assert again == parsed
    assert serialize_diff(again) == text
    assert diff_digest(text) == diff_digest(text.decode("utf-8", "surrogateescape"))


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.text(alphabet="ab \t\r", max_size=6), min_size=1, max_size=30),
       st.lists(st.text(alphabet="abc \t", max_size=6), min_size=0, max_size=30))
def test_property_real_git_diffs_canonicalize_apply_and_digest_stably(
        tmp_path_factory: pytest.TempPathFactory, before: list[str], after: list[str]) -> None:
    repo = tmp_path_factory.mktemp("prop")
    git(repo, "init", "-q", "-b", "main")
    (repo / "f.txt").write_bytes("\n".join(before).encode())
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "b", "--allow-empty")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "f.txt").write_bytes("\n".join(after).encode())
    raw = worktree_diff(repo)
    canon = canonicalize_diff(raw)
    assert canonicalize_diff(canon) == canon
    assert diff_digest(canon) == diff_digest(raw)
    if canon:
        git_bytes(repo, "apply", "--check", input=canon)
        fps = hunk_fingerprints(canon, base)
        assert fps == hunk_fingerprints(raw, base)
        # the in-process applier gives exactly the postimage git would write
        fp = parse_diff(canon).files[0]
        before_b, after_b = "\n".join(before).encode(), "\n".join(after).encode()
        assert diffs.apply_text(fp, before_b) == after_b


_name_chars = st.sampled_from(list("ab_- .\"\\\t'é中") + ["\x7f"])


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.text(alphabet=_name_chars, min_size=1, max_size=6).filter(
    lambda s: s.strip(" .") == s and s not in (".", "..")), min_size=1, max_size=4, unique=True),
       st.binary(max_size=64))
def test_property_awkward_paths_and_bytes_round_trip_through_real_git(
        tmp_path_factory: pytest.TempPathFactory, names: list[str], content: bytes) -> None:
    repo = tmp_path_factory.mktemp("names")
    git(repo, "init", "-q", "-b", "main")
    (repo / "keep").write_text("k\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "b")
    for n in names:
        (repo / n).write_bytes(content + n.encode())
    raw = worktree_diff(repo)
    canon = canonicalize_diff(raw)
    assert canon == raw
    assert sorted(touched_files(raw)) == sorted(names)
    git_bytes(repo, "apply", "--check", input=canon)
