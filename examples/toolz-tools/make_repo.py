#!/usr/bin/env python3
"""Create the git repository the toolz tool-worker example works on.

    python examples/toolz-tools/make_repo.py [--out examples/toolz-tools/repo] [--force]

The repository is the source distribution of toolz 0.12.1 from PyPI, as
published (BSD 3-clause, LICENSE.txt; its own 180 tests in toolz/tests),
committed on `main`. `dome run examples/toolz-tools/work.queue.json` then runs
pyupgrade on each module and four `ruff check --fix` passes over the whole
tree but the tests (overlapping edits), plus one task that breaks `frequencies`;
the project's own pytest validates the integration head. The passes leave
toolz/tests alone: the tests judge the change, and by default a proposal that
changes them waits for a person (docs/security.md, evidence the change cannot
rewrite).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SDIST = HERE / "toolz-0.12.1"  # `pip download --no-binary :all: --no-deps toolz==0.12.1`, unpacked

GITIGNORE = "__pycache__/\n*.pyc\n.pytest_cache/\n.ruff_cache/\n"


def git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "toolz", "GIT_AUTHOR_EMAIL": "dev@toolz.invalid",
           "GIT_COMMITTER_NAME": "toolz", "GIT_COMMITTER_EMAIL": "dev@toolz.invalid",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
           "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, timeout=60)


def make_repo(out: Path, *, force: bool = False) -> Path:
    if out.exists():
        if not force:
            raise SystemExit(f"{out} exists; pass --force to recreate it")
        shutil.rmtree(out)
    shutil.copytree(SDIST, out, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
    (out / ".gitignore").write_text(GITIGNORE)
    git(out, "init", "-q", "-b", "main")
    git(out, "add", "-A")
    git(out, "commit", "-q", "-m", "toolz 0.12.1, the sdist from PyPI")
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
