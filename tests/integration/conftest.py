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


def make_proposal(repo: Path, pid: str, change, *, base: str | None = None, risk="low",
                  atomicity: str = "atomic_proposal", created_at: str = "2026-01-01T00:00:00Z",
                  **extra) -> tuple[dict, bytes]:
    """Run `change(repo)` on a clean checkout of `base`, capture the diff the
    way a worker does, and build the PatchProposal record for it."""
    from registry.diffs import describe_diff
    base = base or head(repo)
    cur = head(repo)
    if cur != base:
        git(repo, "checkout", "-q", "--detach", base)
    change(repo)
    raw = worktree_diff(repo)
    if cur != base:
        git(repo, "checkout", "-q", cur)
    d = describe_diff(raw, base)
    proposal = {
        "artifact_kind": "dome.patch_proposal/v1", "proposal_id": pid, "base_ref": base,
        "base_tree_hash": git(repo, "rev-parse", base + "^{tree}"),
        "diff_canonicalization": d["diff_canonicalization"], "diff_digest": d["diff_digest"],
        "touched_files": d["touched_files"], "hunk_fingerprints": d["hunk_fingerprints"],
        "intent_tags": ["refactor"], "risk": risk, "declared_constraints": {},
        "atomicity": atomicity, "created_at": created_at,
        "worker_run_meta": {"tool_profile_id": "tp-test", "run_id": "run-test", "wave_id": "w1"},
        **extra,
    }
    return proposal, d["canonical"]


def edit_line(path: str, lineno: int, text: str):
    """A change that replaces 1-based line `lineno` of `path`."""
    def change(repo: Path) -> None:
        p = repo / path
        lines = p.read_text().splitlines(keepends=True)
        lines[lineno - 1] = text + "\n"
        p.write_text("".join(lines))
    return change


def tamper_record(ops: Path, run_id: str, topic: str, change, *, last: bool = False) -> None:
    """Change one stored record's payload in the SQLite ledger the way an
    attacker with write access to the database would (triggers dropped)."""
    import json
    import sqlite3
    db = sqlite3.connect(ops / "dome.db")
    try:
        for (name,) in db.execute("select name from sqlite_master where type='trigger'").fetchall():
            db.execute(f"drop trigger {name}")
        order = "desc" if last else "asc"
        row = db.execute(f"select id, payload from events where run_id=? and topic=? order by id {order} limit 1",
                         (run_id, topic)).fetchone()
        assert row is not None, topic
        db.execute("update events set payload=? where id=?", (json.dumps(change(json.loads(row[1]))), row[0]))
        db.commit()
    finally:
        db.close()
