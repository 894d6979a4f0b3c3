"""DRC suites take globs, so they cover whatever masks the stack under validation holds."""
from __future__ import annotations

from pathlib import Path

import pytest

from worker_sdk.klayout_tools.errors import InvalidTarget
from worker_sdk.klayout_tools.intents import expand_layouts


def test_globs_expand_sorted_and_plain_paths_stay(tmp_path: Path) -> None:
    (tmp_path / "masks").mkdir()
    for name in ("b.oas", "a.oas", "notes.txt"):
        (tmp_path / "masks" / name).write_text("x")
    assert expand_layouts(tmp_path, ["masks/*.oas", "layouts/top.gds", "masks/a.oas"]) == \
        ["masks/a.oas", "masks/b.oas", "layouts/top.gds"]
    assert expand_layouts(tmp_path, ["nothing/*.oas"]) == []


@pytest.mark.parametrize("bad", ["/etc/*.conf", "../*.oas", "masks/../../*.oas"])
def test_globs_never_leave_the_checkout(tmp_path: Path, bad: str) -> None:
    with pytest.raises(InvalidTarget):
        expand_layouts(tmp_path, [bad])
