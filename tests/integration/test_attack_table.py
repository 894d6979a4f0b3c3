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
