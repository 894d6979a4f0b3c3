"""Shared fixtures and the suite's rules. Area-specific fixtures live in tests/<area>/conftest.py.

Rules enforced here:
- Under CI=true a skip is a failure. Every skip in this suite means a required
  tool or data set is missing (bubblewrap, KLayout, Ray, PostgreSQL, the MCP
  Inspector, Chromium, the ICCAD 2013 data), and CI must have them all.
- The run ends with the number of skipped tests and why, so a local run that
  skipped something says so in its last lines.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from registry.datasets import iccad13_data
from tests.attacks import pytest_itemcollected  # noqa: F401 - an attack test's class goes into its junit record

from hypothesis import HealthCheck, settings

# Property tests judge what they draw, not how fast: on a shared 2-core machine drawing can be slow,
# so timing health checks and per-example deadlines would fail a correct test at random.
settings.register_profile("dome", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("dome")

REPO_ROOT = Path(__file__).resolve().parent.parent


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _skip_reason(rep) -> str:
    reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
    return reason.removeprefix("Skipped: ")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and not hasattr(rep, "wasxfail") and in_ci():
        rep.outcome = "failed"
        rep.longrepr = f"skipped under CI=true, which needs every tool and data set: {_skip_reason(rep)}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """The same for a whole module skipped while collecting (`pytest.importorskip` at the top)."""
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and in_ci():
        rep.outcome = "failed"
        rep.longrepr = f"skipped under CI=true, which needs every tool and data set: {_skip_reason(rep)}"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if not hasattr(r, "wasxfail")]
    reasons: dict[str, int] = {}
    for r in skipped:
        reason = _skip_reason(r)
        reasons[reason] = reasons.get(reason, 0) + 1
    terminalreporter.write_line(f"skipped: {len(skipped)}")
    for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"  {n} x {reason}")


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


def make_repo(repo: Path) -> Path:
    """A real git repository at `repo` (created) with one commit on branch main."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("hello\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    return repo


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    """A real git repository with one commit on branch main."""
    return make_repo(tmp_path / "repo")


@pytest.fixture
def ops_root(tmp_path: Path) -> Path:
    root = tmp_path / "ops"
    root.mkdir()
    return root


@pytest.fixture(scope="session")
def iccad13() -> Path:
    """The ICCAD 2013 data: the copy examples/iccad13/data ships, or $DOME_ICCAD13_DATA."""
    data = iccad13_data()
    if data is None or not (data / "layouts").is_dir():
        pytest.skip(f"ICCAD 2013 data not found (at {data}); set DOME_ICCAD13_DATA")
    return data


def dome_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
             timeout: float = 300, check: bool = False) -> subprocess.CompletedProcess:
    """Run the `dome` CLI from this checkout in a subprocess (not an installed copy)."""
    import sys
    full_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "coordinator.cli.main", *args], cwd=cwd,
                          env=full_env, capture_output=True, text=True, timeout=timeout, check=check)


GATED_REF = "refs/heads/dome/gated"


def gated_queue(tmp_path: Path, repo: Path, *, drc: bool = True) -> Path:
    """A one-task work queue whose task is in a risk class the default policy holds at the
    human gate (`human_gate.required_for_risk`). The queue is an EDA one (`domain: eda`), so
    that class's policy suites include `drc`, which needs a deck and layouts: with drc=True
    the queue defines it (builtin deck, a layout glob that matches nothing in a plain repo,
    so it passes vacuously)."""
    import json

    spec = json.loads((REPO_ROOT / "registry" / "policy" / "policy_spec.json").read_text())
    risk = spec["policies"]["default"]["human_gate"]["required_for_risk"][0]
    validations: list[dict] = [{"suite": "command", "argv": ["test", "-f", "GATED.txt"], "required": True}]
    if drc:
        validations.append({"suite": "drc", "params": {"deck": "builtin:mask_rules", "layouts": ["**/*.oas"]}})
    q = {"artifact_kind": "dome.work.queue/v1", "name": "gated", "repo": str(repo), "base_ref": "HEAD",
         "determinism_seed": 7, "policy": "default", "domain": "eda", "promote_to": GATED_REF,
         "scheduling": {"max_parallel": 1, "default_max_attempts": 1, "default_timeout_s": 60},
         "tasks": [{"node_id": "risky", "risk": risk, "required_capabilities": ["write"],
                    "required_outputs": ["patch_proposal"],
                    "action_spec": {"intent": "command", "argv": ["sh", "-c", "echo gated > GATED.txt"]},
                    "containers": [], "dependencies": []}],
         "validations": validations}
    path = tmp_path / "gated.queue.json"
    path.write_text(json.dumps(q))
    return path
