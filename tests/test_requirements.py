"""Requirement traceability is executable: every DOME-REQ id maps to tests
that exist. A requirement whose test was renamed or deleted fails here."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REQ_FILE = REPO / "docs" / "requirements.json"
ID = re.compile(r"^DOME-REQ-\d{4}$")


def _requirements() -> dict[str, dict]:
    data = json.loads(REQ_FILE.read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")}


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
