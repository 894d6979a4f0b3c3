"""Requirement traceability is executable. Here, in any run: every DOME-REQ id
maps to tests that exist (a renamed or deleted test fails at once). After a
full run, `python -m tests.traceability JUNIT_XML` (CI's last step) fails
unless every mapped test ran and passed in that run."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.traceability import REPO, Case, DuplicateKey, read_junit, requirements, uncovered

ID = re.compile(r"^DOME-REQ-\d{4}$")


def _requirements() -> dict[str, dict]:
    return requirements()


def _test_names(path: Path) -> set[str]:
    """Test functions and Class::method names defined in a test module."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(f"{node.name}::{item.name}")
    return names


def test_requirement_ids_are_well_formed_and_have_text() -> None:
    for rid, entry in _requirements().items():
        assert ID.match(rid), rid
        assert entry.get("spec") and entry.get("text"), f"{rid} needs spec and text"
        assert entry.get("tests"), f"{rid} has no mapped test"


def test_every_requirement_maps_to_an_existing_test() -> None:
    missing: list[str] = []
    cache: dict[Path, set[str]] = {}
    for rid, entry in _requirements().items():
        for ref in entry["tests"]:
            file_part, _, name = ref.partition("::")
            path = REPO / file_part
            if not path.is_file():
                missing.append(f"{rid}: {file_part} does not exist")
                continue
            names = cache.setdefault(path, _test_names(path))
            if name and name not in names:
                missing.append(f"{rid}: {ref} not found")
    assert not missing, "\n".join(missing)


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.a.test_x" name="test_ok" time="0.1"/>
<testcase classname="tests.a.test_x" name="test_param[1]" time="0.1"/>
<testcase classname="tests.a.test_x" name="test_param[2]" time="0.1"><failure message="boom">x</failure></testcase>
<testcase classname="tests.a.test_x" name="test_skip" time="0.1"><skipped message="no tool">x</skipped></testcase>
<testcase classname="tests.a.test_x" name="test_err" time="0.1"><error message="setup">x</error></testcase>
<testcase classname="tests.a.test_x.TestGroup" name="test_in_class" time="0.1"/>
</testsuite></testsuites>"""


def test_junit_check_needs_every_mapped_test_to_have_run_and_passed(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    cases = read_junit(junit)
    assert Case("tests.a.test_x::TestGroup::test_in_class", "passed") in cases

    def problems(*tests: str) -> list[str]:
        return uncovered({"DOME-REQ-9999": {"tests": list(tests)}}, cases)

    assert problems("tests/a/test_x.py::test_ok", "tests/a/test_x.py::TestGroup::test_in_class") == []
    assert problems("tests/a/test_x.py::test_param") == ["DOME-REQ-9999: tests/a/test_x.py::test_param 1 failed"]
    assert problems("tests/a/test_x.py::test_skip") == ["DOME-REQ-9999: tests/a/test_x.py::test_skip 1 skipped"]
    assert problems("tests/a/test_x.py::test_err") == ["DOME-REQ-9999: tests/a/test_x.py::test_err 1 error"]
    assert problems("tests/a/test_x.py::test_gone") == ["DOME-REQ-9999: tests/a/test_x.py::test_gone did not run"]
    assert problems() == ["DOME-REQ-9999: no test mapped"]


def test_a_key_named_twice_is_refused(tmp_path: Path) -> None:
    # merged area blocks once reused a marker key; json.loads would keep only the last
    dup = tmp_path / "requirements.json"
    dup.write_text('{"_area_x_begin": "1", "DOME-REQ-0001": {}, "_area_x_begin": "2"}')
    with pytest.raises(DuplicateKey):
        requirements(dup)
