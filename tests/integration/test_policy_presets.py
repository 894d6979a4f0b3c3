"""Policies that fit the repository: the preset a queue gets, the size rule and
its figures, and refusals that name what they refused (real git diffs)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.integration.policy import (IntegrationPolicy, describe_rise, describe_source, domain_of,
                                            risk_sources, size_rise)
from coordinator.integration.proposals import changed_lines, check_policy
from coordinator.workqueue import load_work_queue
from registry.diffs import parse_diff
from tests.conftest import REPO_ROOT, git, make_repo


def _diff(tmp: Path, files: dict[str, str | None]) -> bytes:
    """A real `git diff --full-index` changing `files` (path -> new text, None: deleted) in a fresh repository."""
    repo = make_repo(tmp / "r")
    for rel in files:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text("old\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    for rel, text in files.items():
        if text is None:
            (repo / rel).unlink()
        else:
            (repo / rel).write_text(text)
    return git(repo, "diff", "--binary", "--full-index").encode() + b"\n"


def test_a_plain_repository_gets_the_software_preset_and_an_eda_queue_keeps_drc() -> None:
    assert domain_of(["command"], ["command"]) == "software"
    assert domain_of(["command", "litho.optimize"], ["command"]) == "eda"
    assert domain_of(["command"], ["drc"]) == "eda"
    assert domain_of(["litho.optimize"], [], declared="software") == "software"
    software = IntegrationPolicy.load("default", domain="software")
    eda = IntegrationPolicy.load("default", domain="eda")
    # a risk rise asks a software repository for the suites it declares, never for DRC
    for risk in ("low", "medium", "high"):
        assert software.required_suites([risk]) == ["tests"]
    assert eda.required_suites(["medium"]) == ["drc", "tests"]
    assert eda.required_suites(["high"]) == ["drc", "litho.resim", "tests"]
    assert software.domain == "software" and software.digest != eda.digest
    # the shipped examples: a Python project's tool queue and the ICCAD mask job
    assert load_work_queue(REPO_ROOT / "examples/toolz-tools/work.queue.json").domain == "software"
    assert load_work_queue(REPO_ROOT / "examples/iccad13/work.quick.json").domain == "eda"


def test_a_software_queue_with_a_medium_task_passes_preflight_with_its_tests_alone(tmp_path: Path) -> None:
    """Before the presets the default policy refused this queue: `drc` was required for medium risk."""
    from coordinator.preflight import prepare
    repo = make_repo(tmp_path / "repo")
    q = {"artifact_kind": "dome.work.queue/v1", "repo": str(repo), "base_ref": "main", "determinism_seed": 1,
         "policy": "default", "promote_to": "refs/heads/out",
         "tasks": [{"node_id": "fmt", "containers": [], "required_capabilities": ["write"], "required_outputs": [],
                    "dependencies": [], "risk": "medium", "action_spec": {"intent": "command", "argv": ["true"]}}],
         "validations": [{"suite": "command", "name": "tests", "argv": ["true"]}]}
    path = tmp_path / "q.json"
    path.write_text(json.dumps(q))
    assert prepare(path).wq.domain == "software"
    q["domain"] = "eda"
    path.write_text(json.dumps(q))
    with pytest.raises(Exception) as ei:
        prepare(path)
    assert getattr(ei.value, "code", "") == "SUITE_NOT_DEFINED" and "drc" in str(ei.value)


def test_the_size_rule_raises_a_large_proposal_with_its_figures_and_is_configurable(tmp_path: Path) -> None:
    parsed = parse_diff(_diff(tmp_path, {f"pkg/m{i}.py": "new\n" for i in range(21)}))
    files, lines = len(parsed.touched_files()), changed_lines(parsed)
    assert (files, lines) == (21, 42)
    pol = IntegrationPolicy.load("default", domain="software")
    rise = size_rise(pol, files, lines)
    assert rise is not None and rise.raises_to == "medium"
    assert rise.figures == {"files": 21, "lines": 42} and rise.limits == {"files_over": 20, "lines_over": 500}
    assert "21 files" in rise.describe() and "more than 20 files" in rise.describe()
    assert size_rise(pol, 20, 500) is None
    # per policy: a spec's size_rule moves the limits
    spec = json.loads((REPO_ROOT / "registry/policy/policy_spec.json").read_text())
    spec["policies"]["default"]["validation"]["size_rule"] = {"files_over": 50, "lines_over": 5000,
                                                              "raises_to": "high"}
    roomy = IntegrationPolicy.from_spec(spec, "default", "software")
    assert size_rise(roomy, files, lines) is None
    assert size_rise(roomy, 51, 0).raises_to == "high"
    # what a verdict prints: the proposal, its task, the rule and the figures
    src = risk_sources([{"proposal_id": "pp-big", "node_id": "ruff-i", "risk": "medium",
                         "risk_rises": [rise.to_dict()]},
                        {"proposal_id": "pp-small", "node_id": "x", "risk": "low"}])
    assert [s["proposal_id"] for s in src] == ["pp-big"]
    assert "size rule: 21 files, 42 changed lines" in describe_rise(src[0]["rises"][0])
    # a worker's rise for dependency files names them
    deps = risk_sources([{"proposal_id": "pp-fmt", "node_id": "ruff-i", "risk": "medium", "declared_risk": "medium",
                          "dependency_files": ["setup.py"]}])
    assert "touches dependency files setup.py" in describe_source(deps[0])


def test_a_dependency_file_refusal_names_the_file_and_how_to_allow_it(tmp_path: Path) -> None:
    """It said only "dependency/lock files need risk [...]"; it names setup.py now."""
    parsed = parse_diff(_diff(tmp_path, {"setup.py": "new\n", "pkg/a.py": "new\n"}))
    rej = [r for r in check_policy(parsed, {"risk": {"class": "low"}}, IntegrationPolicy())
           if r.code == "POLICY_DEPENDENCY_FILE"]
    assert len(rej) == 1
    assert "setup.py" in rej[0].message and "pkg/a.py" not in rej[0].message
    assert rej[0].details["paths"] == ["setup.py"]
    assert '"risk": "medium"' in rej[0].details["hint"]
    assert not [r for r in check_policy(parsed, {"risk": {"class": "medium"}}, IntegrationPolicy())
                if r.code == "POLICY_DEPENDENCY_FILE"]


def test_declared_constraint_refusals_name_the_paths(tmp_path: Path) -> None:
    parsed = parse_diff(_diff(tmp_path, {"docs/old.md": None, "setup.cfg": "new\n", "pkg/a.py": "new\n"}))
    got = {r.code: r for r in check_policy(parsed, {"risk": {"class": "medium"},
                                                    "declared_constraints": {"no_delete": True, "no_deps": True}},
                                           IntegrationPolicy())}
    assert "docs/old.md" in got["POLICY_CONSTRAINT_NO_DELETE"].message
    assert got["POLICY_CONSTRAINT_NO_DELETE"].details["paths"] == ["docs/old.md"]
    assert "setup.cfg" in got["POLICY_CONSTRAINT_NO_DEPS"].message


def test_the_worker_leaves_the_size_rule_to_the_coordinator_and_marks_setup_py() -> None:
    from worker_sdk.proposal import _risk
    many = [f"m{i}.py" for i in range(30)]
    assert _risk(many, {"added": 900, "removed": 0}, None)["class"] == "low"
    assert _risk(many, {"added": 900}, None)["files_touched"] == 30
    assert _risk(["setup.py"], {}, None)["class"] == "medium"
    assert _risk(["setup.py"], {}, "low")["class"] == "low"  # a task's declared risk stands


def test_failing_tests_are_named_with_their_first_lines() -> None:
    from coordinator.integration.validation import failing_tests
    out = """..F.
=================================== FAILURES ===================================
________________________________ test_frequencies ________________________________

    def test_frequencies():
>       assert frequencies(['cat']) == {'cat': 1}
E       AssertionError: assert {'cat': 2} == {'cat': 1}
E
E         Differing items:

toolz/tests/test_itertoolz.py:30: AssertionError
_____________________________ TestThing.test_other _____________________________
E   ValueError: nope
=========================== short test summary info ============================
FAILED toolz/tests/test_itertoolz.py::test_frequencies - AssertionError: assert {'cat': 2} == {'cat': 1}
FAILED toolz/tests/test_x.py::TestThing::test_other - ValueError: nope
ERROR toolz/tests/test_y.py::test_z - fixture 'q' not found
2 failed, 1 error, 177 passed in 1.30s
"""
    got = failing_tests(out)
    assert [t["name"] for t in got] == ["toolz/tests/test_itertoolz.py::test_frequencies",
                                        "toolz/tests/test_x.py::TestThing::test_other",
                                        "toolz/tests/test_y.py::test_z"]
    assert got[0]["first_lines"] == ["AssertionError: assert {'cat': 2} == {'cat': 1}", "Differing items:"]
    assert got[1]["first_lines"] == ["ValueError: nope"]
    assert got[2]["first_lines"] == ["fixture 'q' not found"]
    assert failing_tests("FAIL: test_a (mod.Case)\nok") == [{"name": "test_a", "first_lines": []}]


def test_a_preset_never_requires_for_a_raised_risk_a_suite_the_queue_cannot_run() -> None:
    """The fullchip stitch touches every tile's files: the size rule makes it medium, and the eda
    preset's DRC suite is one the tiled queue does not declare. A risk class no task declares asks
    only for what the queue provides; a declared one keeps the preset's every suite."""
    from coordinator.integration.policy import fitted_to_queue
    from coordinator.integration.validation_inputs import provided_suites

    eda = IntegrationPolicy.load("default", domain="eda")
    assert "drc" in eda.suites_by_risk["medium"]
    provided = provided_suites([{"suite": "litho.resim", "name": "litho_resim"},
                                {"suite": "command", "name": "tests", "argv": ["true"]}])
    fitted = fitted_to_queue(eda, provided, declared={"low"})
    assert fitted.suites_by_risk["medium"] == ("tests",)
    assert fitted.suites_by_risk["high"] == ("tests", "litho.resim")
    assert fitted.suites_by_risk["low"] == eda.suites_by_risk["low"]
    kept = fitted_to_queue(eda, provided, declared={"low", "medium"})
    assert kept.suites_by_risk["medium"] == eda.suites_by_risk["medium"]
    with_drc = fitted_to_queue(eda, provided | {"drc"}, declared={"low"})
    assert with_drc.suites_by_risk == eda.suites_by_risk
    # a policy that names no preset is left as it is
    plain = IntegrationPolicy.load("default")
    assert fitted_to_queue(plain, set(), declared=set()) is plain
