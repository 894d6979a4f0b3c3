"""`python3` inside a sandbox (worker command or validation suite) is the
Python installation dome runs on (bound read-only), so a suite such as
`python3 -m pytest -q` finds the packages installed beside dome."""
from __future__ import annotations

import sys
from pathlib import Path

from coordinator.integration.canvas import Checkpoint
from coordinator.executors.sandbox import SYSTEM_PATH, sandbox_path
from coordinator.integration.validation import SuiteRunner
from tests.conftest import git


def test_sandbox_path_puts_the_installation_bin_first() -> None:
    path = sandbox_path().split(":")
    assert path[-3:] == SYSTEM_PATH.split(":")
    assert Path(path[0]) == Path(sys.prefix).resolve() / "bin" or path == SYSTEM_PATH.split(":")


def test_validation_suite_python3_has_pytest(git_repo: Path) -> None:
    (git_repo / "test_probe.py").write_text("def test_ok():\n    assert True\n")
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-q", "-m", "probe")
    cp = Checkpoint("cp-0001", 1, git(git_repo, "rev-parse", "HEAD"),
                    git(git_repo, "rev-parse", "HEAD^{tree}"), "", ("p",), ("p",))
    rep = SuiteRunner(git_repo)(cp, {"suite": "command", "name": "tests",
                                     "argv": ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"]})
    assert rep["result"] == "passed", rep["summary"]
