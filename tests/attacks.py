"""The attack-class table of docs/security.md and the tests behind it.

An adversarial test carries `@attack("class-id")` (a `pytest.mark.attack`).
Every row of the table names its class id, the test modules that try it, the
number of attempts (test cases with that mark, parametrized cases counted
one each) and how many were accepted (always 0: each test fails if its
hostile input lands). tests/integration/test_attack_table.py checks the
table and the marks against each other, so a row cannot claim a test that
does not exist and a marked test cannot be missing from the table.
"""
from __future__ import annotations

import importlib
import inspect
import re
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
