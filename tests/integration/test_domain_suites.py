"""Domain validation suites cross a process boundary to worker_sdk: a layout
patch that breaks DRC is bisected to and ejected from the stack."""
from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.integration.validation import SuiteRunner
from tests.conftest import git
from tests.integration.conftest import head, make_proposal
from tests.integration.test_stacking import _stack

kdb = pytest.importorskip("klayout.db")

RULES = {"layer": "2", "datatype": "0", "min_width": "0.2", "min_space": "0.2", "min_area": "0.05"}


def _layout(path: Path, boxes: list[tuple[int, int, int, int]]) -> None:
    ly = kdb.Layout()
    ly.dbu = 0.001
    top = ly.create_cell("TOP")
    for b in boxes:
        top.shapes(ly.layer(2, 0)).insert(kdb.Box(*b))
    ly.write(str(path))


def test_drc_suite_bisects_to_the_layout_patch_that_breaks_it(git_repo: Path) -> None:
    (git_repo / "masks").mkdir()
    _layout(git_repo / "masks" / "tile.oas", [(0, 0, 5000, 5000)])
    for k in range(4):
        (git_repo / f"notes{k}.txt").write_text(f"tile notes {k}\n")
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-qm", "layouts")
    base, base_tree = head(git_repo), git(git_repo, "rev-parse", "HEAD^{tree}")
    props = [make_proposal(git_repo, f"n{k}", lambda r, k=k: (r / f"notes{k}.txt").write_text(f"v2 {k}\n"))
             for k in range(4)]
    # a 50 nm sliver next to the tile: min_width and min_space violations
    props.append(make_proposal(git_repo, "sliver", lambda r: _layout(
        r / "masks" / "tile.oas", [(0, 0, 5000, 5000), (5100, 0, 5150, 5000)])))
    status_before = git(git_repo, "status", "--porcelain", "--untracked-files=all")
    canvas, stacker, events, plan = _stack(git_repo, props)
    try:
        assert "sliver" in canvas.included
        suite = {"suite": "drc", "name": "drc", "deck": "builtin:mask_rules",
                 "layouts": ["masks/tile.oas"], "params": RULES, "top_cell": "TOP"}
        reports = stacker.validate([suite], SuiteRunner(git_repo))
        assert reports[-1]["passed"] is True, reports[-1]["summary"]
        bis = next(a for t, a in events if t == "integration.bisect")
        assert bis["culprit_proposal_ids"] == ["sliver"]
        failing = [r for r in stacker.state.reports if not r["passed"]]
        assert failing and failing[0]["summary"]["summary"]["marker_count"] > 0
        assert stacker.state.why_blocked["sliver"]["state"] == "ejected"
        assert canvas.included == ["n0", "n1", "n2", "n3"]
        # the user's branch, its tree and the working copy are untouched; the canvas moved alone
        assert head(git_repo) == base and git(git_repo, "rev-parse", "main") == base
        assert git(git_repo, "rev-parse", "HEAD^{tree}") == base_tree
        assert git(git_repo, "status", "--porcelain", "--untracked-files=all") == status_before
        assert canvas.head != base
    finally:
        canvas.close()
