"""DRC through both paths: a Ruby deck (klayout -b -r) and the equivalent Python
deck (klayout.db in a child process) give the same markers on the same layout."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from registry import schema_store
from worker_sdk.klayout_tools.deck_library import mask_rule_deck

from .helpers import check, expect_code


def _markers(tools, sid: str, script_type: str, **rules: float) -> tuple[dict, list[tuple]]:
    deck, params = mask_rule_deck(script_type, layer=2, **rules)
    run = check("run_drc_script", tools.run_drc_script({"session_id": sid, "script_path": str(deck),
                                                        "script_type": script_type, "params": params}))
    m = tools.extract_markers({"session_id": sid, "run_id": run["run_id"]})
    return run, [(x["rule"], tuple(x["box_dbu"].values())) for x in m["markers"]]


@pytest.mark.parametrize("fmt", ["gds", "oas"])
def test_ruby_and_python_decks_agree(tools, kl_env, fmt: str) -> None:
    sid = tools.open(kl_env[fmt], top_cell="TOP")["session_id"]
    rules = {"min_width": 0.2, "min_space": 0.2, "min_area": 0.05}
    ruby_run, ruby = _markers(tools, sid, "ruby", **rules)
    py_run, py = _markers(tools, sid, "python", **rules)
    assert ruby == py
    assert [r for r, _ in ruby] == ["min_area", "min_space", "min_width"]
    assert ruby_run["rule_counts"] == py_run["rule_counts"] == {"min_area": 1, "min_space": 1, "min_width": 1}
    layout_copy = Path(ruby_run["artifacts"][2]["path"])
    assert layout_copy.name == f"layout.{fmt}" and layout_copy.is_file()
    assert "drc" in Path(ruby_run["artifacts"][0]["path"]).read_text()  # a real KLayout .lyrdb


def test_python_deck_rule_thresholds(tools, kl_env) -> None:
    sid = tools.open(kl_env["gds"], top_cell="TOP")["session_id"]
    _, none = _markers(tools, sid, "python", min_width=0.05, min_space=0.05, min_area=0.01)
    assert none == []
    _, wide = _markers(tools, sid, "python", min_width=0.2, min_space=0.2, min_area=0.05)
    assert len(wide) == 3


def test_violations_are_the_litho_schema_and_deterministic(tools, kl_env) -> None:
    sid = tools.open(kl_env["gds"], top_cell="TOP")["session_id"]
    deck = kl_env["allowed"] / "dup.py"
    # the same width marker reported twice: one group, one canonical record and one shadow
    deck.write_text("def run(deck):\n    r = deck.input(2, 0).width_check(deck.um(0.2))\n"
                    "    deck.output(r, 'W.MIN')\n    deck.output(r, 'W.MIN')\n")
    run = tools.run_drc_script({"session_id": sid, "script_path": str(deck)})
    v = tools.extract_markers({"session_id": sid, "run_id": run["run_id"]})["violations"]
    for rec in v:
        schema_store.validate("klayout/violation", rec)
    assert [x["dedup_strategy"] for x in v] == ["canonical", "shadow"]
    assert v[0]["violation_group_id"] == v[1]["violation_group_id"] and v[0]["violation_id"] != v[1]["violation_id"]
    assert v[0]["rule_id"] == "W.MIN" and v[0]["rule_deck"] == "dup.py"
    again = tools.run_drc_script({"session_id": sid, "script_path": str(deck)})
    v2 = tools.extract_markers({"session_id": sid, "run_id": again["run_id"]})["violations"]
    assert [x["violation_id"] for x in v2] == [x["violation_id"] for x in v]  # same deck + layout: same ids
    saved = json.loads(Path(again["artifacts"][1]["path"]).read_text())
    assert saved["schema_version"] == "1.0.0" and len(saved["violations"]) == 2


def test_mask_rule_deck_helper_rejects_bad_rules() -> None:
    expect_code("INVALID_TARGET", mask_rule_deck, "python", min_width=0, min_space=1, min_area=1)
    expect_code("INVALID_TARGET", mask_rule_deck, "tcl", min_width=1, min_space=1, min_area=1)


WIDTH_DECK = "source($input, $top_cell)\nreport('w', $output)\ninput(2, 0).width(0.2).output('w', 'narrow')\n"
ALIAS_DECK = "source($gds, $topcell)\nreport('w', $report)\ninput(2, 0).width(0.2).output('w', 'narrow')\n"


def _macro(body: str, interpreter: str = "dsl") -> str:
    from xml.sax.saxutils import escape

    return ('<?xml version="1.0" encoding="utf-8"?>\n<klayout-macro>\n <description>width</description>\n'
            ' <category>drc</category>\n <autorun>false</autorun>\n'
            f' <interpreter>{interpreter}</interpreter>\n <dsl-interpreter-name>drc-dsl-xml</dsl-interpreter-name>\n'
            f' <text>{escape(body)}</text>\n</klayout-macro>\n')


def test_lydrc_macro_decks_run_like_their_script(tools, kl_env) -> None:
    """A KLayout macro (.lydrc) runs the script in its <text>; other macro kinds get a precise refusal."""
    d = kl_env["allowed"]
    plain, macro, alias = d / "w.drc", d / "w.lydrc", d / "alias.drc"
    plain.write_text(WIDTH_DECK)
    macro.write_text(_macro(WIDTH_DECK))
    alias.write_text(ALIAS_DECK)  # the names other KLayout runners give the same three values
    sid = tools.open(kl_env["gds"], top_cell="TOP")["session_id"]
    runs = [tools.run_drc_script({"session_id": sid, "script_path": str(p)}) for p in (plain, macro, alias)]
    marks = [tools.extract_markers({"session_id": sid, "run_id": r["run_id"]})["markers"] for r in runs]
    assert runs[0]["marker_count"] >= 1
    assert [(m["rule"], m["box_dbu"]) for m in marks[0]] == [(m["rule"], m["box_dbu"]) for m in marks[1]] \
        == [(m["rule"], m["box_dbu"]) for m in marks[2]]
    py = d / "p.lydrc"
    py.write_text(_macro("import pya\n", interpreter="python"))
    e = expect_code("DRC_RUN_FAILED", tools.run_drc_script, {"session_id": sid, "script_path": str(py)})
    assert e.details["reason"] == "unsupported_macro" and e.hints
    broken = d / "b.lydrc"
    broken.write_text("<klayout-macro><text>unterminated")
    e = expect_code("DRC_RUN_FAILED", tools.run_drc_script, {"session_id": sid, "script_path": str(broken)})
    assert e.details["reason"] == "bad_macro" and ".drc" in " ".join(e.hints)
