#!/usr/bin/env python3
"""Create the small code repository the agent-swarm example works on.

    python examples/agent-swarm/make_repo.py [--out examples/agent-swarm/repo] [--force]

A plain Python project, as a team would keep it:

    textkit/core.py, textkit/numbers.py   a tiny text/number helper package
    tests/test_core.py, test_numbers.py   its pytest suite
    tools/agent.py                        the scripted "agent" the workers run (a copy of ../agent.py)
    README.md, docs/usage.md, pytest.ini, .gitignore

`dome run examples/agent-swarm/work.queue.json` then points seven command
workers at it (see docs/agent-swarm.md).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CORE = '''"""Text helpers."""


def slugify(text):
    # lowercase, drop puncutation, join the words with dashes
    words = []
    for word in text.lower().split():
        cleaned = "".join(ch for ch in word if ch.isalnum())
        if cleaned:
            words.append(cleaned)
    return "-".join(words)


def word_count(text):
    count = 0
    for word in text.split():
        if any(ch.isalnum() for ch in word):
            count += 1
    # a word needs at least one letter or digit
    return count


def truncate(text, width):
    if width < 4:
        raise ValueError("width must be at least 4")
    if len(text) <= width:
        return text
    # keep room for the ellipsis
    return text[: width - 3] + "..."


def title_case(text):
    small = {"a", "an", "and", "of", "the", "to"}
    words = text.split()
    out = []
    for k, word in enumerate(words):
        out.append(word if k and word.lower() in small else word.capitalize())
    return " ".join(out)
'''

NUMBERS = '''"""Number helpers."""


def clamp(value, lo, hi):
    """Limit VALUE to the closed range [LO, HI]."""
    if lo > hi:
        raise ValueError("empty range")
    return min(hi, max(lo, value))


def mean(values):
    """The arithmetic mean of a non-empty sequence."""
    values = list(values)
    if not values:
        raise ValueError("mean of an empty sequence")
    total = 0
    for v in values:
        total += v
    return total / len(values)
'''

INIT = '''"""textkit: small text and number helpers."""
from .core import slugify, title_case, truncate, word_count
from .numbers import clamp, mean

__all__ = ["clamp", "mean", "slugify", "title_case", "truncate", "word_count"]
'''

TEST_CORE = '''from textkit.core import slugify, title_case, truncate, word_count


def test_slugify():
    assert slugify("Hello, World!") == "hello-world"
    assert slugify("  dome   runs  ") == "dome-runs"
    assert slugify("!!!") == ""


def test_word_count():
    assert word_count("one two  three") == 3
    assert word_count("a - b") == 2


def test_truncate():
    assert truncate("short", 10) == "short"
    assert truncate("a long sentence", 8) == "a lon..."


def test_title_case():
    assert title_case("the art of war") == "The Art of War"
'''

TEST_NUMBERS = '''from textkit.numbers import clamp, mean


def test_clamp():
    assert clamp(5, 0, 10) == 5
    assert clamp(-3, 0, 10) == 0
    assert clamp(42, 0, 10) == 10


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5
'''

README = '''# textkit

Small text and number helpers: `slugify`, `word_count`, `truncate`,
`title_case`, `clamp`, `mean`.

Run the tests with `python3 -m pytest -q`. Contributions recieve a review
before they land; see docs/usage.md for examples.
'''

USAGE = '''# Using textkit

```python
from textkit import slugify, clamp
slugify("Hello, World!")   # "hello-world"
clamp(42, 0, 10)           # 10
```
'''

PYTEST_INI = """[pytest]
testpaths = tests
addopts = -p no:cacheprovider
"""

GITIGNORE = "__pycache__/\n*.pyc\n.pytest_cache/\n"


def git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "textkit", "GIT_AUTHOR_EMAIL": "dev@textkit.invalid",
           "GIT_COMMITTER_NAME": "textkit", "GIT_COMMITTER_EMAIL": "dev@textkit.invalid",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def make_repo(out: Path, *, force: bool = False) -> Path:
    if out.exists():
        if not force:
            raise SystemExit(f"{out} exists; pass --force to recreate it")
        shutil.rmtree(out)
    files = {
        "textkit/__init__.py": INIT, "textkit/core.py": CORE, "textkit/numbers.py": NUMBERS,
        "tests/test_core.py": TEST_CORE, "tests/test_numbers.py": TEST_NUMBERS,
        "README.md": README, "docs/usage.md": USAGE, "pytest.ini": PYTEST_INI, ".gitignore": GITIGNORE,
        "tools/agent.py": (HERE / "agent.py").read_text(),
    }
    for rel, text in files.items():
        p = out / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    git(out, "init", "-q", "-b", "main")
    git(out, "add", "-A")
    git(out, "commit", "-q", "-m", "textkit: helpers, tests and the scripted agent")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "repo")
    ap.add_argument("--force", action="store_true", help="recreate the repository if it exists")
    args = ap.parse_args(argv)
    print(make_repo(args.out.resolve(), force=args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
