"""docs/security.md's attack-class table agrees with the adversarial tests."""
from __future__ import annotations

import re

from tests.attacks import REPO_ROOT, table_rows, marked_attempts

MARK = re.compile(r"""@attack\(\s*["']([^"']+)["']\s*\)""")


def test_every_row_names_marked_tests_with_its_attempt_count_and_none_accepted() -> None:
    rows = table_rows()
    assert rows, "the attack table is empty or its markers are missing"
    ids = [r.class_id for r in rows]
    assert len(ids) == len(set(ids)), ids
    for row in rows:
        counted = 0
        for module in row.modules:
            assert (REPO_ROOT / module).is_file(), (row.class_id, module)
            found = marked_attempts(module).get(row.class_id, 0)
            assert found, f"{module} has no test marked @attack({row.class_id!r})"
            counted += found
        assert counted == row.attempts, (row.class_id, counted, row.attempts)
        assert row.accepted == 0, row


def test_every_marked_attack_has_a_row_naming_its_module() -> None:
    listed = {(r.class_id, m) for r in table_rows() for m in r.modules}
    for path in sorted((REPO_ROOT / "tests").rglob("test_*.py")):
        for class_id in set(MARK.findall(path.read_text())):
            module = path.relative_to(REPO_ROOT).as_posix()
            assert (class_id, module) in listed, f"{module}: @attack({class_id!r}) is not in docs/security.md"


def test_the_table_parser_reads_rows_added_later() -> None:
    text = ("x\n<!-- attack-table:begin -->\n| class | attack | tests | attempts | accepted |\n|---|---|---|---|---|\n"
            "| `a-b` | one | `tests/x.py`, `tests/y.py` | 3 | 0 |\n<!-- attack-table:end -->\n")
    (row,) = table_rows(text)
    assert (row.class_id, row.modules, row.attempts, row.accepted) == ("a-b", ("tests/x.py", "tests/y.py"), 3, 0)


TOY = '''
import pytest
from tests.attacks import attack as hostile  # a name the source scan above does not read

@hostile("toy-held")
def test_held():
    pass

@hostile("toy-held")
@pytest.mark.parametrize("n", [1, 2])
def test_one_case_lets_it_through(n):
    assert n == 1

@hostile("toy-skipped")
def test_not_run():
    pytest.skip("no tool here")
'''

TOY_DOC = ("x\n<!-- attack-table:begin -->\n| class | attack | tests | attempts | accepted |\n|---|---|---|---|---|\n"
           "| `toy-held` | one | `tests/x.py` | 3 | 0 |\n| `toy-skipped` | two | `tests/x.py` | 1 | 0 |\n"
           "<!-- attack-table:end -->\ny\n")


def test_the_numbers_are_counted_from_the_outcomes_of_a_run(tmp_path) -> None:
    """A real pytest run with junit: a failing attack case is counted accepted, a skipped one not
    at all; `check` fails on a table typed by hand, `write` makes it agree."""
    import os
    import subprocess
    import sys

    from tests.attacks import Counted, counted_outcomes, disagreements, main, table_with_counts
    (tmp_path / "test_toy.py").write_text(TOY)
    junit = tmp_path / "junit.xml"
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.attacks", "-p", "no:cacheprovider",
                           f"--junitxml={junit}", "--rootdir", str(tmp_path), str(tmp_path / "test_toy.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout[-2000:]  # the case that let its input through fails
    counts = counted_outcomes(junit)
    assert counts == {"toy-held": Counted(attempts=3, accepted=1)}, counts
    typed = table_rows(TOY_DOC)
    assert disagreements(typed, counts) == [
        "toy-held: the table says 3 attempts, 0 accepted; the run counted 3 attempts, 1 accepted",
        "toy-skipped: the table says 1 attempts, 0 accepted; the run counted 0 attempts, 0 accepted"]
    written = table_with_counts(TOY_DOC, counts)
    assert [(r.class_id, r.attempts, r.accepted) for r in table_rows(written)] == [("toy-held", 3, 1),
                                                                                   ("toy-skipped", 0, 0)]
    assert disagreements(table_rows(written), counts) == [] and written.endswith("\ny\n")
    assert main(["check", str(junit)]) == 1  # the repository's table names none of the toy classes
