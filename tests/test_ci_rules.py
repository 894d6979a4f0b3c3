"""The suite's own rules (tests/conftest.py): under CI=true a skip is a failure, and every run
ends with its skip count."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parent.parent

INNER = '''
import pytest

def test_needs_a_tool():
    pytest.skip("frobnicator not installed")

@pytest.mark.skipif(True, reason="no klayout here")
def test_marked():
    pass

def test_fine():
    pass

@pytest.mark.xfail(reason="known", strict=True)
def test_expected_failure():
    assert False
'''


MODULE_SKIP = '''
import pytest

frob = pytest.importorskip("frobnicator_that_is_not_installed")


def test_uses_it():
    pass
'''


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str | None) -> pytest.RunResult:
    shutil.copy(REPO / "tests" / "conftest.py", pytester.path / "conftest.py")
    # the copied conftest imports the suite's helpers (`tests.attacks`): the repository is on the path
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    pytester.makepyfile(test_inner=INNER, test_module_skip=MODULE_SKIP)
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    ci_flags = ["--continue-on-collection-errors"] if ci else []  # as .ci/run passes it
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "--junitxml", str(pytester.path / "j.xml"),
                                         *ci_flags)


def test_skips_are_reported_and_counted_outside_ci(pytester: pytest.Pytester, monkeypatch) -> None:
    res = _run(pytester, monkeypatch, None)
    res.assert_outcomes(passed=1, skipped=3, xfailed=1)
    res.stdout.fnmatch_lines(["skipped: 3"])
    for reason in ("frobnicator not installed", "no klayout here", "could not import 'frobnicator_that_is_not_installed'*"):
        res.stdout.fnmatch_lines([f"  1 x *{reason}"])


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_a_skip_is_a_failure(pytester: pytest.Pytester, monkeypatch, ci: str) -> None:
    res = _run(pytester, monkeypatch, ci)
    # a skip in setup, or of a whole module while collecting, fails as an error
    res.assert_outcomes(passed=1, failed=1, errors=2, xfailed=1)
    assert res.ret != 0
    res.stdout.fnmatch_lines(["*skipped under CI=true*: frobnicator not installed*"])
    res.stdout.fnmatch_lines(["*skipped under CI=true*: no klayout here*"])
    res.stdout.fnmatch_lines(["*skipped under CI=true*frobnicator_that_is_not_installed*"])
    res.stdout.fnmatch_lines(["skipped: 0"])
    junit = (pytester.path / "j.xml").read_text()
    assert junit.count("<failure") + junit.count("<error") == 3
    assert junit.count("<skipped") == 1 and "xfail" in junit  # only the expected failure
