"""The attack-class table of docs/security.md and the test outcomes behind it.

An adversarial test carries `@attack("class-id")` (a `pytest.mark.attack`);
`pytest_itemcollected` (used by tests/conftest.py) writes the class into the
test's junit record. Each row of the table names its class id, the test
modules that try it, and two numbers counted from a run's junit report
(`counted_outcomes`): `attempts`, the cases of that class that ran (each
parametrized case counted), and `accepted`, those that failed, since each
test fails when its hostile input gets through (an error counts as accepted
too: fail closed). After a full run:

    python -m tests.attacks write JUNIT_XML   # rewrite the table's numbers from the run
    python -m tests.attacks check JUNIT_XML   # exit 1 when the table disagrees with the run

CI runs `check` on its own run. tests/integration/test_attack_table.py checks
that every row names modules with tests of its class, and that every marked
test has its row.
"""
from __future__ import annotations

import importlib
import inspect
import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SECURITY_DOC = REPO_ROOT / "docs" / "security.md"
BEGIN, END = "<!-- attack-table:begin -->", "<!-- attack-table:end -->"


def attack(class_id: str):
    """Mark an adversarial test as an attempt of attack class `class_id`."""
    return pytest.mark.attack(class_id)


@dataclass(frozen=True)
class Row:
    class_id: str
    attack: str
    modules: tuple[str, ...]
    attempts: int
    accepted: int


def table_rows(text: str | None = None) -> list[Row]:
    text = SECURITY_DOC.read_text() if text is None else text
    body = text.split(BEGIN, 1)[1].split(END, 1)[0]
    rows = []
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[0].startswith("`") or set(cells[0]) <= {"-", " "}:
            continue
        rows.append(Row(cells[0].strip("`"), cells[1],
                        tuple(m.strip().strip("`") for m in cells[2].split(",")), int(cells[3]), int(cells[4])))
    return rows


def _cases(fn) -> int:
    n = 1
    for mark in getattr(fn, "pytestmark", []):
        if mark.name == "parametrize":
            n *= len(mark.args[1])
    return n


def marked_attempts(module: str) -> dict[str, int]:
    """class id -> number of test cases marked with it in a test module (a file path
    relative to the repository, e.g. tests/integration/test_hostile_proposals.py)."""
    name = re.sub(r"\.py$", "", module).replace("/", ".")
    mod = importlib.import_module(name)
    out: dict[str, int] = {}
    for attr, fn in vars(mod).items():
        if not attr.startswith("test_") or not inspect.isfunction(fn):
            continue
        for mark in getattr(fn, "pytestmark", []):
            if mark.name == "attack":
                out[mark.args[0]] = out.get(mark.args[0], 0) + _cases(fn)
    return out


def pytest_itemcollected(item) -> None:
    """Name an adversarial test's attack class in its junit record (a `property`)."""
    for mark in item.iter_markers("attack"):
        item.user_properties.append(("attack", mark.args[0]))


@dataclass(frozen=True)
class Counted:
    attempts: int = 0  # cases of the class that ran
    accepted: int = 0  # of those, the ones that failed: the hostile input got through


def counted_outcomes(junit: Path | str) -> dict[str, Counted]:
    """class id -> what a run's junit report says its cases did (skipped cases did not run)."""
    out: dict[str, Counted] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        classes = {p.get("value") for p in case.iter("property") if p.get("name") == "attack"}
        if not classes or case.find("skipped") is not None:
            continue
        bad = case.find("failure") is not None or case.find("error") is not None
        for c in classes:
            was = out.get(str(c), Counted())
            out[str(c)] = Counted(was.attempts + 1, was.accepted + int(bad))
    return out


def disagreements(rows: list[Row], counts: dict[str, Counted]) -> list[str]:
    """Where the table's numbers are not the run's (empty when they agree)."""
    out = []
    for r in rows:
        got = counts.get(r.class_id, Counted())
        if (r.attempts, r.accepted) != (got.attempts, got.accepted):
            out.append(f"{r.class_id}: the table says {r.attempts} attempts, {r.accepted} accepted; "
                       f"the run counted {got.attempts} attempts, {got.accepted} accepted")
    listed = {r.class_id for r in rows}
    out += [f"{c}: counted in the run but has no row" for c in sorted(set(counts) - listed)]
    return out


def table_with_counts(text: str, counts: dict[str, Counted]) -> str:
    """`text` (docs/security.md) with each row's attempts and accepted taken from `counts`."""
    head, rest = text.split(BEGIN, 1)
    body, tail = rest.split(END, 1)
    lines = []
    for line in body.split("\n"):
        cells = line.split("|")
        row = table_rows(f"{BEGIN}\n{line}\n{END}")
        if row and len(cells) == 7:
            got = counts.get(row[0].class_id, Counted())
            cells[4], cells[5] = f" {got.attempts} ", f" {got.accepted} "
            line = "|".join(cells)
        lines.append(line)
    return head + BEGIN + "\n".join(lines) + END + tail


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("check", "write"):
        print("usage: python -m tests.attacks check|write JUNIT_XML", file=sys.stderr)
        return 2
    counts = counted_outcomes(argv[1])
    if argv[0] == "write":
        SECURITY_DOC.write_text(table_with_counts(SECURITY_DOC.read_text(), counts))
        return 0
    bad = disagreements(table_rows(), counts)
    for line in bad:
        print(f"attack table: {line}")
    total = sum(c.attempts for c in counts.values())
    accepted = sum(c.accepted for c in counts.values())
    print(f"attack table: {len(counts)} classes, {total} attempts, {accepted} accepted"
          + ("" if not bad else f"; {len(bad)} rows disagree with this run"))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
