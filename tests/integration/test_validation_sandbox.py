"""Validation suites run code from the proposals: they get a read-only view of
the head and nothing of the coordinator (keys, ledger, repository)."""
from __future__ import annotations

from pathlib import Path

from coordinator.integration.canvas import Checkpoint
from coordinator.integration.validation import SuiteRunner
from coordinator.keys import load_or_create_signing_key
from tests.conftest import git


def _cp(repo: Path) -> Checkpoint:
    head = git(repo, "rev-parse", "HEAD")
    return Checkpoint("cp-0001", 1, head, git(repo, "rev-parse", "HEAD^{tree}"), "", ("p",), ("p",))


def _run(repo: Path, script: str, **env: str) -> dict:
    return SuiteRunner(repo)(_cp(repo), {"suite": "command", "name": "probe",
                                         "argv": ["sh", "-c", script], "env": env})


def test_suite_cannot_see_keys_ledger_or_repository(git_repo: Path, tmp_path: Path) -> None:
    ops = tmp_path / "ops"
    load_or_create_signing_key(ops)
    key = ops / "keys" / "coordinator.ed25519"
    assert key.is_file()
    rep = _run(git_repo, 'test ! -e "$KEY" && test ! -e "$REPO/.git" && test ! -e "$OPS"',
               KEY=str(key), REPO=str(git_repo), OPS=str(ops))
    assert rep["result"] == "passed", rep["summary"]


def test_suite_sees_the_head_read_only_without_network(git_repo: Path) -> None:
    rep = _run(git_repo, "test -f README.md && ! touch README.md 2>/dev/null && ! touch new 2>/dev/null")
    assert rep["result"] == "passed", rep["summary"]
    rep = _run(git_repo, "test ! -e .git")
    assert rep["result"] == "passed", rep["summary"]
    net = _run(git_repo, "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), 2)\"")
    assert net["result"] == "failed"
    assert net["environment"]["sandbox"] == "bwrap" and net["environment_digest"].startswith("sha256:")
