"""Evidence the change cannot rewrite, end to end through `dome run` with command workers in
the configured sandbox: a low-risk worker that weakens `tests/test_mod.py` and breaks
`pkg/mod.py` in one proposal is judged by the base's tests as well, waits for consent (it is
not promoted), and lands only with the consent token; a worker that only adds a test file is
promoted with no consent asked. The repository's pytest is the required suite."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.attacks import attack
from tests.conftest import dome_cli, git
from tests.runloop.conftest import cmd_task
from tests.runloop.test_hostile_workers import DRC, _events, _ref, _run

PYTEST = {"suite": "command", "name": "tests", "argv": ["python3", "-m", "pytest", "-q"], "required": True,
          "timeout_s": 120}
BROKEN = "def double(x):\n    return x + 1\n"
WEAK = "def test_double():\n    assert True\n"
WEAKEN_SH = f"printf '{BROKEN}' > pkg/mod.py && printf '{WEAK}' > tests/test_mod.py"
WEAKEN_PY = (f"from pathlib import Path\nPath('pkg/mod.py').write_text({BROKEN!r})\n"
             f"Path('tests/test_mod.py').write_text({WEAK!r})\n")


def _project(repo: Path) -> None:
    (repo / "pkg").mkdir()
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "mod.py").write_text("def double(x):\n    return 2 * x\n")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_mod.py").write_text("from pkg.mod import double\n\n\ndef test_double():\n"
                                                "    assert double(3) == 6\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "project")


def _task(kind: str) -> dict:
    t = cmd_task("weaken", WEAKEN_SH, risk="low")
    if kind == "python":
        t["action_spec"] = {"intent": "command", "argv": [sys.executable, "-c", WEAKEN_PY]}
    return t


@pytest.mark.slow
@attack("validation-input-rewrite")
@pytest.mark.parametrize("worker", ["sh", "python"])
def test_weakened_tests_and_broken_code_wait_for_consent_and_land_only_with_it(git_repo: Path, tmp_path: Path,
                                                                               worker: str) -> None:
    _project(git_repo)
    # the Python worker's run integrates during the run (the canvas driver's path), the shell one at the end
    extra = {"scheduling": {"integrate_during_run": True, "integration_batch_size": 1, "max_parallel": 1}} \
        if worker == "python" else {}
    out, ops = _run(tmp_path, git_repo, [_task(worker)], validations=[PYTEST, DRC], **extra)
    assert out["status"] == "blocked" and out["awaiting_consent"] is True, out
    assert _ref(git_repo, "refs/heads/dome/out") is None
    events = _events(ops, out["run_id"])
    (verified,) = [e["payload"] for e in events if e["topic"] == "integration.proposal_verified"]
    assert verified["risk"] == "high", verified
    assert verified["validation_inputs_changed"] == {"paths": ["tests/test_mod.py"], "suites": ["tests"]}
    reports = [e["payload"] for e in events if e["topic"] == "integration.validation_report"]
    own = [r for r in reports if r["suite"] == "tests" and r["phase"] == "final"]
    base = [r for r in reports if r["phase"] == "base_inputs"]
    assert own and own[-1]["passed"] is True  # the weakened tests pass on the broken code
    assert base and {r["suite"] for r in base} == {"tests"} and base[-1]["passed"] is False, base
    assert base[-1]["inputs"]["restored"] == ["tests/test_mod.py"]
    assert base[-1]["head_ref"] == own[-1]["head_ref"]
    gate = json.loads((ops / "runs" / out["run_id"] / "gate" / "gate.decision.json").read_text())
    assert "consent: missing (human approval required by policy)" in gate["missing"], gate
    assert {"link": "validation_inputs:tests", "status": "ok"}.items() <= next(
        l for l in gate["links"] if l["link"] == "validation_inputs:tests").items()
    # a person who reads the base's failing report may still take the change: the token lands it
    token = (ops / "runs" / out["run_id"] / "gate" / "consent.token").read_text().strip()
    ok = dome_cli("promote", out["run_id"], "--consent", token, "--ops-root", str(ops), "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    head = _ref(git_repo, "refs/heads/dome/out")
    assert head is not None and "return x + 1" in git(git_repo, "show", f"{head}:pkg/mod.py")
    ver = dome_cli("verify", out["run_id"], "--ops-root", str(ops), "--json")
    assert ver.returncode == 0 and json.loads(ver.stdout)["valid"] is True, ver.stdout[-3000:]
    assert "validation_inputs" in {c["kind"] for c in json.loads(ver.stdout)["checks"]}


@pytest.mark.slow
def test_a_proposal_that_only_adds_a_test_is_promoted_without_consent(git_repo: Path, tmp_path: Path) -> None:
    _project(git_repo)
    add = ("printf 'def triple(x):\\n    return 3 * x\\n' >> pkg/mod.py && printf 'from pkg.mod import triple"
           "\\n\\n\\ndef test_triple():\\n    assert triple(2) == 6\\n' > tests/test_triple.py")
    out, ops = _run(tmp_path, git_repo, [cmd_task("add", add, risk="low")], validations=[PYTEST, DRC])
    assert out["status"] == "promoted", out
    events = _events(ops, out["run_id"])
    (verified,) = [e["payload"] for e in events if e["topic"] == "integration.proposal_verified"]
    assert verified["risk"] == "low" and "validation_inputs_changed" not in verified, verified
    assert not [e for e in events if e["topic"] == "integration.validation_report"
                and e["payload"]["phase"] == "base_inputs"]
