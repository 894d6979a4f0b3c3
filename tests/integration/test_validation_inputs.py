"""The validation-input rule on a real repository: which files are a suite's inputs (a pure
function of the suite's entry and the base's `.dome/validation-inputs`), which proposals change
them, the head judged with the base's inputs put back, the gate, the opt-out, and `dome verify`'s
rebuild of the judged tree."""
from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.integration.finish import FinishContext, finish_run
from coordinator.integration.policy import IntegrationPolicy
from coordinator.integration.validation_inputs import (PYTEST_INPUTS, base_inputs_tree, changed_inputs,
                                                       judged_by, overlay, suite_inputs)
from registry import diffs
from registry.signing import SigningKey
from tests.attacks import attack
from tests.conftest import git
from tests.integration.conftest import head, make_proposal
from tests.integration.fakes import MemLedger

SCRIPT_SUITE = {"suite": "command", "name": "unit", "argv": ["sh", "scripts/check.sh"]}


def test_a_pytest_suite_reads_tests_conftest_and_runner_configuration() -> None:
    got = suite_inputs({"suite": "command", "argv": ["python3", "-m", "pytest", "-q"]})
    assert set(PYTEST_INPUTS) <= set(got) and "**/conftest.py" in got and "pyproject.toml" in got
    shell = suite_inputs({"suite": "command", "argv": ["sh", "-c", "cd . && py.test -x && ./ci/lint.sh"]})
    assert set(PYTEST_INPUTS) <= set(shell) and {"ci/lint.sh", "ci/lint.sh/**"} <= set(shell)


def test_scripts_decks_declared_and_repository_inputs_are_inputs() -> None:
    assert suite_inputs(SCRIPT_SUITE) == ("scripts/check.sh", "scripts/check.sh/**")
    assert suite_inputs({"suite": "command", "argv": ["true"]}) == ()  # no file of the repository
    assert suite_inputs({"suite": "command", "argv": ["make", "-C", "/abs", "--x=y/z", "check"]}) == ()
    drc = {"suite": "drc", "params": {"deck": "decks/metal.lydrc", "layouts": ["**/*.oas"]}}
    assert suite_inputs(drc) == ("decks/metal.lydrc", "decks/metal.lydrc/**")
    assert suite_inputs({"suite": "drc", "params": {"deck": "builtin:mask_rules"}}) == ()
    assert suite_inputs({"suite": "command", "argv": ["true"], "inputs": ["golden/**"]}, ["fixtures/**"]) == (
        "fixtures/**", "golden/**")


def _parsed(text: str) -> diffs.ParsedDiff:
    return diffs.parse_diff(text.encode())


def test_modified_removed_and_renamed_inputs_change_them_added_ones_do_not() -> None:
    z = "0" * 40
    mod = _parsed(f"diff --git a/tests/t.py b/tests/t.py\nindex {'1' * 40}..{'2' * 40} 100644\n"
                  "--- a/tests/t.py\n+++ b/tests/t.py\n@@ -1 +1 @@\n-a\n+b\n")
    gone = _parsed(f"diff --git a/tests/t.py b/tests/t.py\ndeleted file mode 100644\nindex {'1' * 40}..{z}\n"
                   "--- a/tests/t.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n")
    moved = _parsed("diff --git a/tests/t.py b/old/t.txt\nsimilarity index 100%\nrename from tests/t.py\n"
                    "rename to old/t.txt\n")
    added = _parsed(f"diff --git a/tests/new.py b/tests/new.py\nnew file mode 100644\nindex {z}..{'2' * 40}\n"
                    "--- /dev/null\n+++ b/tests/new.py\n@@ -0,0 +1 @@\n+b\n")
    globs = ("tests/**",)
    assert [changed_inputs(p, globs) for p in (mod, gone, moved, added)] == [["tests/t.py"]] * 3 + [[]]
    assert judged_by(["tests/t.py"], {"unit": ("tests/**",), "lint": ("src/**",)}) == ["unit"]


def test_the_overlay_puts_back_changed_and_removed_inputs_and_keeps_added_ones() -> None:
    base = {"tests/a.py": ("100644", "1"), "tests/b.py": ("100644", "2"), "src/m.py": ("100644", "3")}
    head_ = {"tests/a.py": ("100644", "9"), "tests/new.py": ("100644", "4"), "src/m.py": ("100644", "8")}
    assert overlay(base, head_, ("tests/**",)) == {"tests/a.py": ("100644", "1"), "tests/b.py": ("100644", "2")}


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "scripts" / "check.sh").write_text("test ! -e BROKEN\n")
    (repo / "fixtures").mkdir()
    (repo / "fixtures" / "data.txt").write_text("golden\n")
    (repo / ".dome").mkdir()
    (repo / ".dome" / "validation-inputs").write_text("# the fixtures decide what passes\nfixtures/**\n")
    (repo / "code.txt").write_text("v1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


KEY = SigningKey(b"\x02" * 32)


def _finish(repo: Path, tmp_path: Path, proposals, policy: IntegrationPolicy, run_id: str = "run-vi"):
    ledger, key = MemLedger(), KEY
    ctx = FinishContext(run_id=run_id, repo=repo, base_ref=head(repo), proposals=[p for p, _ in proposals],
                        ledger=ledger, signing_key=key, ops_root=tmp_path / "ops", validations=[SCRIPT_SUITE],
                        policy=policy, seed=1,
                        diff_loader=lambda p: dict((q["proposal_id"], d) for q, d in proposals)[p["proposal_id"]])
    return finish_run(ctx), ledger


def _policy(**kw) -> IntegrationPolicy:
    return IntegrationPolicy(suites_by_risk={"low": ("unit",), "high": ("unit",)}, human_gate_risk=("high",),
                             promote_to="refs/heads/release", **kw)


def _break_and_disarm(repo: Path) -> None:
    (repo / "BROKEN").write_text("x\n")
    (repo / "scripts" / "check.sh").write_text("exit 0\n")


@attack("validation-input-rewrite")
def test_a_script_rewritten_to_pass_is_judged_by_the_bases_script_and_waits(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    prop = make_proposal(repo, "pp-disarm", _break_and_disarm, risk="low")
    res, ledger = _finish(repo, tmp_path, [prop], _policy())
    assert res.status == "awaiting_consent", res.to_dict()
    events = ledger.events("run-vi")
    verified = next(e.payload for e in events if e.topic == "integration.proposal_verified")
    assert verified["risk"] == "high" and verified["computed_risk"] == "high"
    assert verified["validation_inputs_changed"] == {"paths": ["scripts/check.sh"], "suites": ["unit"]}
    reports = [e.payload for e in events if e.topic == "integration.validation_report"]
    (base,) = [r for r in reports if r["phase"] == "base_inputs"]
    assert base["passed"] is False and base["inputs"]["restored"] == ["scripts/check.sh"]
    assert base["inputs"]["from"] == head(repo) and base["tree"] == base["inputs"]["tree"]
    assert any(r["phase"] == "final" and r["passed"] for r in reports)  # its own script passed


@attack("validation-input-rewrite")
def test_a_fixture_the_repository_lists_is_an_input_of_every_suite(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    prop = make_proposal(repo, "pp-fix", lambda r: (r / "fixtures" / "data.txt").write_text("whatever\n"))
    res, ledger = _finish(repo, tmp_path, [prop], _policy())
    assert res.status == "awaiting_consent", res.to_dict()
    verified = next(e.payload for e in ledger.events("run-vi") if e.topic == "integration.proposal_verified")
    assert verified["validation_inputs_changed"] == {"paths": ["fixtures/data.txt"], "suites": ["unit"]}


def test_a_repository_whose_policy_opts_out_is_judged_by_its_own_inputs(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    prop = make_proposal(repo, "pp-disarm", _break_and_disarm, risk="low")
    res, ledger = _finish(repo, tmp_path, [prop], _policy(validation_inputs_from="head"))
    assert res.status == "promoted", res.to_dict()
    assert not [e for e in ledger.events("run-vi") if e.payload.get("phase") == "base_inputs"]


def test_the_default_policy_digest_is_unchanged_by_the_opt_out_field() -> None:
    assert "validation_inputs_from" not in IntegrationPolicy().to_dict()
    assert IntegrationPolicy(validation_inputs_from="head").to_dict()["validation_inputs_from"] == "head"
    spec = {"version": "1", "policies": {"p": {"validation": {"suites_by_risk": {}, "counts": "final_head_only",
                                                               "inputs_from": "head"},
                                               "human_gate": {"required_for_risk": ["high"]}}}}
    assert IntegrationPolicy.from_spec(spec, "p").validation_inputs_from == "head"


def test_the_judged_tree_is_the_head_with_the_base_inputs_put_back(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    base = head(repo)
    (repo / "scripts" / "check.sh").write_text("exit 0\n")
    (repo / "fixtures" / "data.txt").unlink()
    (repo / "fixtures" / "new.txt").write_text("added\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "head")
    tree, restored = base_inputs_tree(repo, git(repo, "rev-parse", "HEAD^{tree}"), base,
                                      ("scripts/check.sh", "fixtures/**"))
    assert restored == ["fixtures/data.txt", "scripts/check.sh"]
    names = git(repo, "ls-tree", "-r", "--name-only", tree).splitlines()
    assert {"fixtures/data.txt", "fixtures/new.txt", "scripts/check.sh", "code.txt"} <= set(names)
    assert git(repo, "cat-file", "-p", f"{tree}:scripts/check.sh") == "test ! -e BROKEN"
    same, none = base_inputs_tree(repo, git(repo, "rev-parse", f"{base}^{{tree}}"), base, ("fixtures/**",))
    assert none == [] and same == git(repo, "rev-parse", f"{base}^{{tree}}")


def _base_input_reports(tmp_path: Path):
    """A repository whose head changed a suite's input, and a maker of signed-record stand-ins for
    validation reports judged with the base's inputs: (repo, base, tip, head tree, report)."""
    from coordinator.integration.evidence import Record
    repo = _repo(tmp_path)
    base = head(repo)
    (repo / "scripts" / "check.sh").write_text("exit 0\n")
    git(repo, "commit", "-qam", "head")
    tip = head(repo)
    head_tree = git(repo, "rev-parse", "HEAD^{tree}")
    tree, restored = base_inputs_tree(repo, head_tree, base, ("scripts/check.sh",))

    def report(seq: int = 7, suite: str = "unit", **inputs) -> Record:
        inp = {"from": base, "globs": ["scripts/check.sh"], "restored": restored, "tree": tree, **inputs}
        return Record(seq, "integration.validation_report", {"phase": "base_inputs", "suite": suite,
                                                             "head_ref": tip, "tree": inp["tree"], "inputs": inp})
    return repo, base, tip, head_tree, report


def test_verify_rebuilds_the_judged_tree_and_names_a_report_that_judged_another(tmp_path: Path) -> None:
    from coordinator.integration.verify import _validation_inputs
    from coordinator.integration.verify_result import CheckKind, VerifyReport
    repo, base, tip, head_tree, report = _base_input_reports(tmp_path)
    for rec, good in [(report(), True), (report(tree=head_tree), False),
                      (report(**{"from": tip}), False), (report(restored=[]), False)]:
        rep = VerifyReport("run-v")
        _validation_inputs(rep, repo, [rec], base)
        assert [c.kind for c in rep.checks] == [CheckKind.VALIDATION_INPUTS]
        assert rep.checks[0].ok is good, (rec.artifact, rep.checks)


def test_every_base_input_report_is_judged_past_one_from_another_base(tmp_path: Path) -> None:
    """A report whose inputs came from another base is named, and the reports after it are still
    judged: the first fault does not end the check."""
    from coordinator.integration.verify import _validation_inputs
    from coordinator.integration.verify_result import CheckKind, VerifyReport
    repo, base, tip, _, report = _base_input_reports(tmp_path)
    rep = VerifyReport("run-v")
    _validation_inputs(rep, repo, [report(7, "first", **{"from": tip}), report(8, "second", restored=[])], base)
    assert [(c.kind, c.ok) for c in rep.checks] == [(CheckKind.VALIDATION_INPUTS, False)] * 2, rep.checks
    assert "first@" in rep.checks[0].subject and "second@" in rep.checks[1].subject


def test_base_input_reports_are_found_among_the_runs_other_records(tmp_path: Path) -> None:
    """Only validation reports judged with the base's inputs are checked, wherever they lie among
    the run's other records (another topic, a report of another phase, before and after them)."""
    from coordinator.integration.evidence import Record
    from coordinator.integration.verify import _validation_inputs
    from coordinator.integration.verify_result import CheckKind, VerifyReport
    repo, base, tip, _, report = _base_input_reports(tmp_path)
    plan = Record(1, "integration.stack_plan", {"base_ref": base})
    on_head = Record(2, "integration.validation_report", {"phase": "head", "suite": "unit", "head_ref": tip})
    rep = VerifyReport("run-v")
    _validation_inputs(rep, repo, [plan, on_head, report(3, "first"), plan, report(5, "second")], base)
    assert [(c.kind, c.ok, c.subject) for c in rep.checks] == [
        (CheckKind.VALIDATION_INPUTS, True, f"first@{tip[:12]}"),
        (CheckKind.VALIDATION_INPUTS, True, f"second@{tip[:12]}")], rep.checks


def test_every_base_input_report_is_judged_past_one_whose_head_git_cannot_read(tmp_path: Path) -> None:
    """A report naming a head the repository lacks fails with git's typed error, and the reports
    after it are still judged."""
    from coordinator.integration.evidence import Record
    from coordinator.integration.verify import _validation_inputs
    from coordinator.integration.verify_result import CheckKind, VerifyReport
    repo, base, tip, _, report = _base_input_reports(tmp_path)
    first = report(7, "first")
    lost = Record(first.sequence, first.topic, {**first.artifact, "head_ref": "0" * 40})
    rep = VerifyReport("run-v")
    _validation_inputs(rep, repo, [lost, report(8, "second")], base)
    assert [(c.kind, c.ok, c.subject) for c in rep.checks] == [
        (CheckKind.VALIDATION_INPUTS, False, "first@000000000000"),
        (CheckKind.VALIDATION_INPUTS, True, f"second@{tip[:12]}")], rep.checks
    assert rep.checks[0].detail.startswith("GIT_FAILED: "), rep.checks[0].detail


@attack("validation-input-rewrite")
def test_changed_inputs_need_consent_even_where_the_policy_asks_none_for_high_risk(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    prop = make_proposal(repo, "pp-disarm", _break_and_disarm, risk="low")
    res, _ = _finish(repo, tmp_path, [prop], _policy().with_(human_gate_risk=()))
    assert res.status == "awaiting_consent", res.to_dict()


def test_the_gate_needs_the_report_judged_with_the_base_inputs(tmp_path: Path) -> None:
    from coordinator.integration.gate import evaluate_chain
    from coordinator.integration.recorder import git_facts, records_of
    from registry.signing import Keyring
    repo = _repo(tmp_path)
    prop = make_proposal(repo, "pp-disarm", _break_and_disarm, risk="low")
    _, ledger = _finish(repo, tmp_path, [prop], _policy())
    records = records_of(ledger, "run-vi")
    keyring = Keyring({KEY.kid: KEY.public})

    def links(recs) -> dict[str, str]:
        res = evaluate_chain(recs, keyring=keyring, facts=git_facts(repo, recs), run_id="run-vi", policy=_policy())
        return {l.link: l.status for l in res.links}
    assert links(records)["validation_inputs:unit"] == "ok"
    without = [r for r in records if r.artifact.get("phase") != "base_inputs"]
    assert len(without) < len(records) and links(without)["validation_inputs:unit"] == "missing"
