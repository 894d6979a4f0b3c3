"""Requirement traceability against a real test run.

docs/requirements.json maps every DOME-REQ id to the tests that check it. After
the suite has run with `--junitxml=FILE`, this check fails unless every mapped
test ran in that run and passed (every parametrized case of it, and at least
one case). A requirement whose test was skipped, failed, deselected, renamed
or deleted is reported by id.

    python -m tests.traceability FILE     # exit 0 all requirements covered, 1 otherwise
"""
from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REQ_FILE = REPO / "docs" / "requirements.json"


class DuplicateKey(ValueError):
    """docs/requirements.json names one key twice; json would silently keep the last."""


def _unique_pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    seen: dict[str, object] = {}
    for key, value in pairs:
        if key in seen:
            raise DuplicateKey(f"docs/requirements.json: key {key!r} appears twice")
        seen[key] = value
    return seen


def requirements(path: Path = REQ_FILE) -> dict[str, dict]:
    data = json.loads(path.read_text(), object_pairs_hook=_unique_pairs)
    return {k: v for k, v in data.items() if not k.startswith("_")}


def node_key(ref: str) -> str:
    """'tests/a/test_b.py::C::test_d' -> 'tests.a.test_b::C::test_d' (junit's classname spelling)."""
    file_part, _, rest = ref.partition("::")
    module = file_part.removesuffix(".py").replace("/", ".")
    return f"{module}::{rest}" if rest else module


@dataclass(frozen=True)
class Case:
    key: str  # module::[Class::]function, parameters dropped
    outcome: str  # passed | failed | error | skipped


def read_junit(path: Path) -> list[Case]:
    cases: list[Case] = []
    for tc in ET.parse(path).getroot().iter("testcase"):
        classname, name = tc.get("classname", ""), tc.get("name", "")
        parts = classname.split(".")
        # the module is the dotted path up to the first capitalised part (a test class)
        cls_at = next((i for i, p in enumerate(parts) if p[:1].isupper()), len(parts))
        module, classes = ".".join(parts[:cls_at]), parts[cls_at:]
        func = name.split("[", 1)[0]
        outcome = "passed"
        for child in tc:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                break
        cases.append(Case("::".join([module, *classes, func]), outcome))
    return cases


def uncovered(reqs: dict[str, dict], cases: list[Case]) -> list[str]:
    """One line per requirement test that did not run and pass in this run."""
    by_key: dict[str, list[str]] = {}
    for c in cases:
        by_key.setdefault(c.key, []).append(c.outcome)
    problems: list[str] = []
    for rid, entry in sorted(reqs.items()):
        for ref in entry.get("tests") or []:
            key = node_key(ref)
            outcomes = by_key.get(key, [])
            if not outcomes and "::" not in ref:  # a whole module is mapped
                outcomes = [o for k, v in by_key.items() if k.startswith(key + "::") for o in v]
            if not outcomes:
                problems.append(f"{rid}: {ref} did not run")
            elif any(o != "passed" for o in outcomes):
                bad = Counter(o for o in outcomes if o != "passed")
                problems.append(f"{rid}: {ref} " + ", ".join(f"{n} {o}" for o, n in sorted(bad.items())))
        if not entry.get("tests"):
            problems.append(f"{rid}: no test mapped")
    return problems


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tests.traceability JUNIT_XML", file=sys.stderr)
        return 2
    junit = Path(args[0])
    if not junit.is_file():
        print(f"traceability: no junit XML at {junit}", file=sys.stderr)
        return 1
    cases = read_junit(junit)
    counts = Counter(c.outcome for c in cases)
    reqs = requirements()
    problems = uncovered(reqs, cases)
    print(f"tests: {len(cases)} ({', '.join(f'{n} {o}' for o, n in sorted(counts.items()))}); "
          f"skipped: {counts.get('skipped', 0)}")
    for line in problems:
        print(f"traceability: {line}")
    print(f"requirements: {len(reqs)}, not covered by a passing test in this run: "
          f"{len({p.split(':', 1)[0] for p in problems})}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
