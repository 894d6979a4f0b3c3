"""Fixtures for the integration area: real git repositories and diffs."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from registry.diffs import DIFF_GIT_ARGS
from tests.conftest import git

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
           "GIT_CONFIG_NOSYSTEM": "1"}


def git_bytes(cwd: Path, *args: str, input: bytes | None = None) -> bytes:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          input=input, env={**os.environ, **GIT_ENV}).stdout


def worktree_diff(repo: Path) -> bytes:
    """The diff of the working tree (incl. untracked files) against HEAD,
    produced the way a worker produces it."""
    git(repo, "add", "-A")
    out = git_bytes(repo, *DIFF_GIT_ARGS, "--cached", "HEAD")
    git(repo, "reset", "-q", "--hard", "HEAD")
    git(repo, "clean", "-qfdx")
    return out


def head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def big_repo(tmp_path: Path) -> Path:
    """A repository with 20 files of 60 numbered lines each."""
    repo = tmp_path / "big"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for k in range(20):
        (repo / f"f{k:02d}.txt").write_text("".join(f"file {k} line {i}\n" for i in range(1, 61)))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo
