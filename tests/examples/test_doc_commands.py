"""The example command blocks of README.md, docs/running.md and docs/cli.md (the fenced `sh`
blocks: the ones a reader copies and runs; synopses and sample output are fenced without a
language) run as written, twice in a row, and succeed both times.

They run in a copy of the checkout's tracked `examples/`, `ops/` and `scripts/` (what they write,
the example repositories and the run's files, lands there), with dome from this checkout. Two things differ from a
reader's terminal, each for a reason the test states:
- `bash scripts/setup.sh && python -m pytest -q` (README command 2) is not run here: a test cannot
  run the suite it belongs to, and setup installs into the machine's Python. `.ci/run` runs that
  exact line on every CI run, which this test checks.
- `scripts/quickstart.sh` runs with DOME_SKIP_SETUP=1 (the machine is already set up) for the same
  reason; the job it runs, the repository, the run, verify and the report, is the one a reader gets.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

DOCS = ("README.md", "docs/running.md", "docs/cli.md")
SETUP_AND_SUITE = "bash scripts/setup.sh && python -m pytest -q"


def sh_blocks(text: str) -> list[str]:
    """The commands of each fenced `sh` block: comments and blank lines dropped."""
    blocks = []
    for body in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M):
        lines = [re.sub(r"\s+#.*$", "", line).strip() for line in body.splitlines()]
        blocks.append("\n".join(line for line in lines if line and not line.startswith("#")))
    return blocks


def doc_blocks() -> list[tuple[str, str]]:
    return [(doc, block) for doc in DOCS for block in sh_blocks((REPO_ROOT / doc).read_text())]


def test_the_docs_have_example_blocks_and_ci_runs_readme_command_2():
    blocks = doc_blocks()
    assert any("quickstart.sh" in b for _, b in blocks) and any("agent-swarm" in b for _, b in blocks)
    assert any(SETUP_AND_SUITE in b for _, b in blocks)
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert f"\n{SETUP_AND_SUITE} ||" in ci  # the README's line, unchanged, under CI=true


def _copy(tmp_path: Path) -> Path:
    """The tracked files a fresh clone has under the folders the examples use."""
    root = tmp_path / "checkout"
    tracked = subprocess.run(["git", "ls-files", "-z", "examples", "ops", "scripts"], cwd=REPO_ROOT,
                             capture_output=True, text=True, check=True, timeout=60).stdout.split("\0")
    for name in filter(None, tracked):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, root / name)
    return root


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("doc,block", doc_blocks(), ids=lambda v: v.split("\n")[0][:40])
def test_each_example_block_runs_as_written_twice_in_a_row(tmp_path, doc, block):
    block = block.replace(SETUP_AND_SUITE, "").strip()  # run by .ci/run itself (see above)
    if not block:
        return
    root = _copy(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "DOME_SKIP_SETUP": "1"}
    for attempt in (1, 2):
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=root, env=env, capture_output=True,
                           text=True, timeout=840)
        assert r.returncode == 0, f"{doc}, run {attempt}:\n{block}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
