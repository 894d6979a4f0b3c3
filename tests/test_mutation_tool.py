"""The mutation runner's own parts (tests/mutation.py): its map of modules to fast tests
names files that exist, its statement map is what coverage.py records, and the mutants
it makes of a small module are the slips it promises."""
from __future__ import annotations

from pathlib import Path

from tests import mutation as mu

ROOT = Path(__file__).resolve().parent.parent


def test_every_target_and_its_tests_exist_and_the_ci_sample_names_targets() -> None:
    for t in mu.TARGETS:
        assert (ROOT / t.path).is_file(), t.path
        assert t.tests and all((ROOT / f).is_file() for f in t.tests), t
        if t.functions:
            src = (ROOT / t.path).read_text()
            assert len(mu._function_lines(src, t.functions)) == len(t.functions), t
    for name in mu.CI_TARGETS:
        assert any(name in t.path for t in mu.TARGETS), name
    for (path, op, line), why in mu.EQUIVALENT.items():
        assert op in mu.OPERATORS and why and line in (ROOT / path).read_text(), (path, line)


def test_a_line_maps_to_the_statement_that_holds_it() -> None:
    src = "def f(a, b):\n    if (a and\n            b):\n        return 1\n    x = [\n        a,\n    ]\n    return x\n"
    lines = mu.statement_lines(src)
    assert lines[2] == lines[3] == 2      # a condition's continuation line is its `if`
    assert lines[4] == 4 and lines[6] == 5 and lines[8] == 8
    assert lines[1] == 1


def test_the_mutants_of_a_module_are_small_slips_and_respect_no_mutate(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("def ok(a, b):\n    if a == b and b > 0:\n        return True\n"
                                   "    return a < b  # pragma: no mutate\n")
    got = {(m.line, m.operator.split("/")[-1], m.after.strip()) for m, _ in
           mu.mutants_of(mu.Target("m.py", ("t.py",)), root=tmp_path)}
    assert (2, "ReplaceComparisonOperator_Eq_NotEq", "if a != b and b > 0:") in got
    assert (2, "ReplaceAndWithOr", "if a == b or b > 0:") in got
    assert (2, "ReplaceComparisonOperator_Gt_GtE", "if a == b and b >= 0:") in got
    assert (3, "ReplaceTrueWithFalse", "return False") in got
    assert not any(line == 4 for line, _, _ in got)


def test_an_earlier_runs_mutants_are_left_out_and_only_those(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("def ok(a, b):\n    return a == b or b > 0\n")
    made = [m for m, _ in mu.mutants_of(mu.Target("m.py", ("t.py",)), root=tmp_path)]
    first = made[0]
    line = ('{"path": "m.py", "line": %d, "operator": "%s", "before": "", "after": "%s", "outcome": "failed"}'
            % (first.line, first.operator, first.after.strip()))
    done = mu.judged_before([line, ""])
    assert done == {first.describe()}
    assert [m for m in made if m.describe() not in done] == made[1:]
