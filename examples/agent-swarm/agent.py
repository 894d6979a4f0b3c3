#!/usr/bin/env python3
"""A small scripted coding "agent" for the dome agent-swarm example.

    python3 tools/agent.py INSTRUCTION [ARGS...]

It edits files in its current directory the way a coding agent would, but
deterministically (no model, no network), so a dome run that uses it is
reproducible. Instructions:

    docstrings MODULE               add a one-line docstring to every function of MODULE that lacks one
    refactor FUNCTION MODULE        rewrite FUNCTION's body (a known, behaviour-preserving rewrite)
    fix-typo WRONG RIGHT FILE...    replace a misspelt word in the given files
    add-function NAME MODULE TESTS  add a function to MODULE and its test to TESTS
    optimize FUNCTION MODULE        "optimize" FUNCTION (this rewrite is wrong: it introduces a bug)
    review                          run the test suite and report; changes nothing

Resolver mode: when dome sends a conflicting proposal back to the agent
(DOME_RESOLVE=1, the checkout is then the integration head and
DOME_RESOLVE_DIFF names the diff that no longer applies), the agent says so
and carries out the same instruction again on the code as it is now. Its
rewrites keep a docstring the function has gained meanwhile.

Standard library only: in a dome worker it runs inside the sandbox with
the checkout as its working directory.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

DOCSTRINGS = {
    "slugify": "Lowercase TEXT and join its alphanumeric words with dashes.",
    "word_count": "Count the words of TEXT that hold at least one letter or digit.",
    "truncate": "Shorten TEXT to at most WIDTH characters, ending with '...' when cut.",
    "title_case": "Capitalize each word of TEXT except short joining words.",
}

REFACTORS = {
    "slugify": [
        "def slugify(text: str) -> str:",
        "    words = (''.join(ch for ch in word if ch.isalnum()) for word in text.lower().split())",
        "    return '-'.join(word for word in words if word)",
    ],
}

OPTIMIZATIONS = {  # wrong on purpose: min and max swapped
    "clamp": [
        "def clamp(value, lo, hi):",
        '    """Limit VALUE to the closed range [LO, HI]."""',
        "    return max(hi, min(lo, value))",
    ],
}

NEW_FUNCTIONS = {
    "median": (
        ["def median(values):",
         "    ordered = sorted(values)",
         "    if not ordered:",
         "        raise ValueError('median of an empty sequence')",
         "    mid = len(ordered) // 2",
         "    if len(ordered) % 2:",
         "        return ordered[mid]",
         "    return (ordered[mid - 1] + ordered[mid]) / 2"],
        ["def test_median():",
         "    assert median([3, 1, 2]) == 2",
         "    assert median([4, 1, 3, 2]) == 2.5"],
    ),
}


def say(msg: str) -> None:
    print(f"agent: {msg}", flush=True)


def _functions(source: str) -> list[ast.FunctionDef]:
    return [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)]


def _replace_function(path: Path, name: str, new_lines: list[str], keep_docstring: bool = False) -> None:
    lines = path.read_text().splitlines()
    fn = next((f for f in _functions(path.read_text()) if f.name == name), None)
    if fn is None:
        raise SystemExit(f"agent: no function {name} in {path}")
    doc = ast.get_docstring(fn, clean=False)
    if keep_docstring and doc is not None and not any('"""' in line for line in new_lines):
        first = fn.body[0]  # the docstring statement, kept as written
        new_lines = [new_lines[0], *lines[first.lineno - 1:first.end_lineno], *new_lines[1:]]
    lines[fn.lineno - 1:fn.end_lineno] = new_lines
    path.write_text("\n".join(lines) + "\n")


def docstrings(module: str) -> None:
    path = Path(module)
    lines = path.read_text().splitlines()
    added = []
    for fn in sorted(_functions(path.read_text()), key=lambda f: -f.lineno):  # bottom up: line numbers hold
        if ast.get_docstring(fn) is not None:
            continue
        text = DOCSTRINGS.get(fn.name, fn.name.replace("_", " ").capitalize() + ".")
        indent = " " * (fn.body[0].col_offset)
        lines.insert(fn.lineno, f'{indent}"""{text}"""')  # right under the (one-line) def
        added.append(fn.name)
    path.write_text("\n".join(lines) + "\n")
    say(f"added docstrings to {', '.join(reversed(added)) or 'nothing'} in {module}")


def refactor(name: str, module: str) -> None:
    _replace_function(Path(module), name, REFACTORS[name], keep_docstring=True)
    say(f"refactored {name} in {module}")


def optimize(name: str, module: str) -> None:
    _replace_function(Path(module), name, OPTIMIZATIONS[name])
    say(f"optimized {name} in {module}")


def fix_typo(wrong: str, right: str, *files: str) -> None:
    for f in files:
        p = Path(f)
        text = p.read_text()
        if wrong in text:
            p.write_text(text.replace(wrong, right))
            say(f"fixed {wrong!r} -> {right!r} in {f}")


def add_function(name: str, module: str, tests: str) -> None:
    body, test = NEW_FUNCTIONS[name]
    mod = Path(module)
    mod.write_text(mod.read_text().rstrip("\n") + "\n\n\n" + "\n".join(body) + "\n")
    tpath = Path(tests)
    pkg = ".".join(Path(module).with_suffix("").parts)
    # a new test module: a change to an existing test file would need consent (the tests judge the change)
    text = tpath.read_text() if tpath.exists() else f"from {pkg} import {name}\n"
    first, _, rest = text.partition("\n")
    if first.startswith(f"from {pkg} import ") and name not in first.split(" import ", 1)[1].split(", "):
        text = first.rstrip() + f", {name}\n" + rest  # extend the import line
    tpath.write_text(text.rstrip("\n") + "\n\n\n" + "\n".join(test) + "\n")
    say(f"added {name} to {module} and its test to {tests}")


def review() -> None:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"])
    say("tests pass" if proc.returncode == 0 else "tests FAIL")
    raise SystemExit(proc.returncode)


COMMANDS = {"docstrings": docstrings, "refactor": refactor, "optimize": optimize,
            "fix-typo": fix_typo, "add-function": add_function, "review": review}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(__doc__, file=sys.stderr)
        return 2
    if os.environ.get("DOME_RESOLVE"):
        dropped = Path(os.environ.get("DOME_RESOLVE_DIFF", ""))
        files = sorted({line[6:] for line in dropped.read_text().splitlines() if line.startswith("+++ b/")}
                       if dropped.is_file() else [])
        say(f"resolving {os.environ.get('DOME_RESOLVE_PROPOSAL', '?')} ({', '.join(files) or 'no files'}) "
            f"on the integration head {os.environ.get('DOME_RESOLVE_HEAD', '?')[:12]}: {' '.join(argv)} again")
    COMMANDS[argv[0]](*argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
