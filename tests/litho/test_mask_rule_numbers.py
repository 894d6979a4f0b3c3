"""The mask rules live in one place (registry/mask_rules.py): the example decks, the ILT
clean-up's preset and docs/litho.md must say the same numbers, and the decks must flag what a
mask shop flags on curvilinear masks (Euclidean spacing, corner-to-corner touches)."""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import klayout.db as kdb
import pytest

from registry import mask_rules
from worker_sdk.cancel import CancellationToken
from worker_sdk.klayout_tools import intents
from worker_sdk.litho.api import _mask_rules
from worker_sdk.litho.layout import rasterize_exact
from worker_sdk.litho.presets import apply_preset

ROOT = Path(__file__).resolve().parents[2]
NUMBERS = (mask_rules.MIN_WIDTH_NM, mask_rules.MIN_SPACE_NM, mask_rules.MIN_AREA_NM2)


def _example(name: str):
    spec = importlib.util.spec_from_file_location(f"make_repo_{name}", ROOT / "examples" / name / "make_repo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _deck_numbers(text: str) -> tuple[int, int, int]:
    """(width, space, area) in nm / nm² as a deck's own code states them."""
    num = r"([0-9]+(?:\.[0-9]+)?(?:e-?[0-9]+)?)"
    widths = {round(float(v) * 1000) for v in re.findall(r"width(?:_check)?\((?:deck\.um\()?" + num + r"(?:\.um|\))", text)}
    spaces = {round(float(v) * 1000) for v in re.findall(r"space(?:_check)?\((?:deck\.um\()?" + num + r"(?:\.um|\))", text)}
    areas = {round(float(v) * 1e6) for v in re.findall(r"with_area\((?:nil|None), (?:deck\.um2\()?" + num, text)}
    assert len(widths) == len(spaces) == len(areas) == 1, (widths, spaces, areas)
    return widths.pop(), spaces.pop(), areas.pop()


def test_decks_preset_cleanup_and_docs_state_the_same_mask_rules() -> None:
    iccad = _example("iccad13")
    for deck in (iccad.RUBY_DECK, iccad.PY_DECK):
        assert _deck_numbers(deck) == NUMBERS
        assert "euclidian" in deck.lower() and "corner_touch" in deck
    # the clean-up the preset asks for enforces the same numbers
    rules = _mask_rules(apply_preset({"preset": "mrc-quality"})["mrc"])
    assert (rules.min_feature_px, rules.min_space_px, rules.min_area_px) == NUMBERS
    # the example queues ask the optimizer for them too
    for queue in ("work.queue.json", "work.quick.json"):
        for task in json.loads((ROOT / "examples/iccad13" / queue).read_text())["tasks"]:
            mrc = task["action_spec"]["params"].get("mrc")
            if mrc is not None:
                rules = _mask_rules(apply_preset({"preset": "mrc-quality", "mrc": mrc})["mrc"])
                assert (rules.min_feature_px, rules.min_space_px, rules.min_area_px) == NUMBERS
    full = _example("fullchip").MRC
    assert (full["min_feature_nm"], full["min_area_nm2"]) == (NUMBERS[0], NUMBERS[2])
    # and docs/litho.md quotes them
    doc = (ROOT / "docs" / "litho.md").read_text()
    said = re.search(r"minimum width (\d+) nm,\s+minimum space (\d+) nm, minimum area (\d+) nm²", doc)
    assert said is not None and tuple(int(g) for g in said.groups()) == NUMBERS


class _Ctx:
    def __init__(self, scratch: Path, action: dict) -> None:
        self.scratch, self.action, self.seed = scratch, action, 0
        self.token = CancellationToken()
        self.limits: dict = {}

    def progress(self, fraction: float, message: str = "") -> None:
        pass

    def put_artifact(self, data: bytes, media_type: str = "application/octet-stream") -> str:
        return "sha256:" + "0" * 64


def _checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "checkout"
    (repo / "rules").mkdir(parents=True)
    (repo / "masks").mkdir()
    (repo / "rules" / "mask_rules.drc").write_text(mask_rules.ruby_deck())
    (repo / "rules" / "mask_rules.py").write_text(mask_rules.python_deck())
    for name, boxes in (("touch", [(0, 0, 40, 40), (40, 40, 80, 80)]),     # corner-to-corner touch
                        ("diagonal", [(0, 0, 40, 40), (45, 45, 85, 85)]),  # 7.07 nm apart, corner to corner
                        ("clean", [(0, 0, 40, 40), (50, 50, 90, 90)])):    # 14.1 nm apart
        ly = kdb.Layout()
        ly.dbu = 0.001
        top = ly.create_cell("TOP")
        for b in boxes:
            top.shapes(ly.layer(1, 0)).insert(kdb.Box(*b))
        ly.write(str(repo / "masks" / f"{name}.oas"))
    return repo


@pytest.mark.parametrize("deck,script_type", [("rules/mask_rules.py", "python"), ("rules/mask_rules.drc", "ruby")])
def test_example_deck_flags_corner_touches_and_euclidean_spaces_projection_misses(tmp_path, deck, script_type):
    repo = _checkout(tmp_path)

    def counts(layout: str) -> dict[str, int]:
        res = intents.run_drc(_Ctx(repo, {"deck": deck, "script_type": script_type, "layout": layout}))
        return res.summary["rule_counts"]

    touch = counts("masks/touch.oas")
    assert touch.get("corner_touch", 0) >= 1 and touch.get("min_width_euclidean", 0) >= 1
    diagonal = counts("masks/diagonal.oas")
    assert diagonal.get("min_space_euclidean", 0) >= 1
    assert diagonal.get("min_space", 0) == 0 and diagonal.get("corner_touch", 0) == 0  # projection misses it
    assert counts("masks/clean.oas") == {}


def test_mask_polygons_fill_boundary_exclusive_targets_lithobench_inclusive() -> None:
    # the quality table's convention: a mask polygon covers its cells [x, x+1) x [y, y+1) (a 2x2 nm
    # square is 4 pixels, the exact-area fill); a target filled as LithoBench does takes the closed
    # polygon's integer points (the same square is 9 pixels)
    from worker_sdk.litho.layout import Layout, rasterize

    square = [(1, 1), (3, 1), (3, 3), (1, 3)]
    cells = rasterize_exact([square], (6, 6))
    assert int(cells.sum()) == 4 and cells[1:3, 1:3].all()
    layout = Layout(polygons=(tuple(square),), source="tiny")
    assert int(rasterize(layout, "exact", 6, (0, 0)).sum()) == 4
    assert int(rasterize(layout, "lithobench", 6, (0, 0)).sum()) == 9
