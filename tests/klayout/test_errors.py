"""Every contract error code, each triggered by a real cause."""
from __future__ import annotations

import os
from pathlib import Path

from worker_sdk.klayout_tools.errors import CONTRACT_CODES
from worker_sdk.klayout_tools.sessions import SessionStore

from .conftest import Tools
from .helpers import expect_code

BOX = {"left": 0.0, "bottom": 0.0, "right": 10.0, "top": 10.0}


def test_file_not_found(tools, kl_env) -> None:
    e = expect_code("FILE_NOT_FOUND", tools.open, kl_env["fixtures"] / "missing.gds")
    assert e.details["path"].endswith("missing.gds")


def test_unsupported_format(tools, kl_env) -> None:
    d = kl_env["allowed"]
    (d / "notes.txt").write_text("hello")
    expect_code("UNSUPPORTED_FORMAT", tools.open, d / "notes.txt")  # unknown extension
    expect_code("UNSUPPORTED_FORMAT", tools.open, kl_env["gds"], format="dxf")  # unknown format name
    (d / "fake.gds").write_text("this is not GDSII")
    e = expect_code("UNSUPPORTED_FORMAT", tools.open, d / "fake.gds")  # content is not GDS
    assert e.details["detected"] is None
    expect_code("UNSUPPORTED_FORMAT", tools.open, kl_env["oas"], format="gds")  # OASIS bytes declared gds
    (d / "cut.gds").write_bytes(kl_env["gds"].read_bytes()[:200])  # truncated GDS: KLayout cannot read it
    expect_code("UNSUPPORTED_FORMAT", tools.open, d / "cut.gds")


def test_top_cell_not_found(tools, kl_env) -> None:
    e = expect_code("TOP_CELL_NOT_FOUND", tools.open, kl_env["gds"], top_cell="MMI")  # a cell, not a top cell
    assert e.details["top_cells"] == ["AUX", "TOP"] and e.details["is_cell"] is True


def test_session_not_found(tools) -> None:
    expect_code("SESSION_NOT_FOUND", tools.list_layers, {"session_id": "ses_000000000000"})


def test_session_expired(tools, kl_env, monkeypatch) -> None:
    import time
    monkeypatch.setenv("KLAYOUT_MCP_SESSION_TTL_SECONDS", "0.2")
    sid = tools.open(kl_env["gds"])["session_id"]
    time.sleep(0.3)
    expect_code("SESSION_EXPIRED", tools.list_cells, {"session_id": sid})


def test_invalid_box(tools, kl_env) -> None:
    sid = tools.open(kl_env["gds"], top_cell="TOP")["session_id"]
    for box in ({"left": 10.0, "bottom": 0.0, "right": 0.0, "top": 10.0},
                {"left": 0.0, "bottom": 0.0, "right": 1e12, "top": 10.0},
                {"left": 0.0, "bottom": 0.0, "right": 0.0001, "top": 10.0},
                {"left": 0.0, "bottom": 0.0, "right": 10.0}):
        expect_code("INVALID_BOX", tools.query_region, {"session_id": sid, "box": box})
    expect_code("INVALID_BOX", tools.render_view, {"session_id": sid, "box": {**BOX, "top": -1.0}})
    r = tools.run_drc_script({"session_id": sid, "script_path": str(_empty_deck(kl_env)), "script_type": "python"})
    expect_code("INVALID_BOX", tools.extract_markers, {"session_id": sid, "run_id": r["run_id"],
                                                       "include_crops": True, "crop_size_um": {"x": 0, "y": 5}})


def _empty_deck(kl_env) -> Path:
    deck = kl_env["allowed"] / "empty.py"
    deck.write_text("def run(deck):\n    deck.output(deck.input(2, 0).width_check(1), 'none')\n")
    return deck


def test_invalid_layer(tools, kl_env) -> None:
    sid = tools.open(kl_env["gds"], top_cell="TOP")["session_id"]
    e = expect_code("INVALID_LAYER", tools.query_region, {"session_id": sid, "box": BOX,
                                                          "layers": [{"layer": 99, "datatype": 0}]})
    assert {"layer": 1, "datatype": 0} in e.details["available"]
    expect_code("INVALID_LAYER", tools.set_view, {"session_id": sid, "layers": [{"layer": 1, "datatype": 7}]})
    expect_code("INVALID_LAYER", tools.render_view, {"session_id": sid, "layers": [{"layer": -1, "datatype": 0}]})


def test_invalid_target(tools, kl_env) -> None:
    sid = tools.open(kl_env["gds"], top_cell="TOP")["session_id"]
    q = tools.query_region({"session_id": sid, "box": {"left": 499, "bottom": -1, "right": 531, "top": 11}})
    box_id = q["shapes"][0]["id"]
    expect_code("INVALID_TARGET", tools.analyze_waveguide, {"session_id": sid, "target_id": box_id})  # not a path
    expect_code("INVALID_TARGET", tools.analyze_waveguide, {"session_id": sid, "target_id": "shp_deadbeef"})
    expect_code("INVALID_TARGET", tools.measure_geometry, {"session_id": sid, "mode": "edge_gap",
                                                           "target_ids": [box_id]})  # needs two
    expect_code("INVALID_TARGET", tools.measure_geometry, {"session_id": sid, "mode": "bend_radius_estimate",
                                                           "target_ids": [box_id]})
    expect_code("INVALID_TARGET", tools.measure_geometry, {"session_id": sid, "mode": "wiggle",
                                                           "target_ids": [box_id]})
    expect_code("INVALID_TARGET", tools.describe_cell, {"session_id": sid, "cell": "NOPE"})
    expect_code("INVALID_TARGET", tools.query_region, {"session_id": sid, "box": BOX, "cell": "NOPE"})
    expect_code("INVALID_TARGET", tools.extract_markers, {"session_id": sid, "run_id": "drc_00000000"})
    expect_code("INVALID_TARGET", tools.render_view, {"session_id": sid, "annotations": [
        {"kind": "shape_outline", "target_ids": ["shp_00000000"]}]})
    expect_code("INVALID_TARGET", tools.list_cells, {"session_id": sid, "typo_field": 1})  # closed request
    # a shape id from one session is unknown in another (ids are session-scoped)
    other = tools.open(kl_env["gds"], top_cell="TOP")["session_id"]
    expect_code("INVALID_TARGET", tools.analyze_waveguide, {"session_id": other, "target_id": box_id})


def test_query_too_large(tools, kl_env, monkeypatch) -> None:
    sid = tools.open(kl_env["gds"], top_cell="TOP")["session_id"]
    big = {"left": -10.0, "bottom": -10.0, "right": 600.0, "top": 200.0}
    expect_code("QUERY_TOO_LARGE", tools.query_region, {"session_id": sid, "box": big, "max_shapes": 10_001})
    monkeypatch.setenv("KLAYOUT_MCP_QUERY_SCAN_LIMIT", "10")
    e = expect_code("QUERY_TOO_LARGE", tools.query_region, {"session_id": sid, "box": big})
    assert e.details["scan_limit"] == 10
    small = tools.query_region({"session_id": sid, "box": {"left": -1, "bottom": -1, "right": 1, "top": 1}})
    assert small["summary"]["shape_count"] >= 1  # under the limit still works


def test_tool_limit_exceeded(tools, kl_env, monkeypatch) -> None:
    sid = tools.open(kl_env["gds"], top_cell="TOP")["session_id"]
    expect_code("TOOL_LIMIT_EXCEEDED", tools.render_view, {"session_id": sid,
                                                           "image_size": {"width": 20000, "height": 10}})
    deck = kl_env["allowed"] / "many.py"
    deck.write_text("def run(deck):\n    deck.output(deck.input(2, 0), 'every_metal_shape')\n")
    r = tools.run_drc_script({"session_id": sid, "script_path": str(deck)})
    assert r["script_type"] == "python" and r["marker_count"] == 10
    monkeypatch.setenv("KLAYOUT_MCP_MAX_CROPS", "2")
    expect_code("TOOL_LIMIT_EXCEEDED", tools.extract_markers, {"session_id": sid, "run_id": r["run_id"],
                                                               "include_crops": True})
    monkeypatch.setenv("KLAYOUT_MCP_MAX_SESSIONS", "2")  # this store already holds one session
    tools.open(kl_env["gds"])
    expect_code("TOOL_LIMIT_EXCEEDED", tools.open, kl_env["gds"])


def test_render_failed(tools, kl_env) -> None:
    r = tools.open(kl_env["gds"], top_cell="TOP")
    renders = Path(r["artifact_root"]) / "renders"
    renders.rmdir()
    renders.write_text("a file where the renders directory should be")
    expect_code("RENDER_FAILED", tools.render_view, {"session_id": r["session_id"],
                                                     "image_size": {"width": 32, "height": 32}})


def test_drc_run_failed(tools, kl_env, monkeypatch) -> None:
    sid = tools.open(kl_env["gds"], top_cell="TOP")["session_id"]
    bad = kl_env["allowed"] / "broken.py"
    bad.write_text("def run(deck):\n    raise ValueError('deck bug on purpose')\n")
    e = expect_code("DRC_RUN_FAILED", tools.run_drc_script, {"session_id": sid, "script_path": str(bad)})
    assert e.details["reason"] == "nonzero_exit" and "deck bug on purpose" in e.details["stderr_tail"]
    assert Path(e.details["stderr_path"]).is_file()
    nodeck = kl_env["allowed"] / "norun.py"
    nodeck.write_text("X = 1\n")
    e = expect_code("NOT_A_DECK", tools.run_drc_script, {"session_id": sid, "script_path": str(nodeck)})
    assert e.details["reason"] == "not_a_python_deck"  # refused before it runs
    slow = kl_env["allowed"] / "slow.py"
    slow.write_text("import time\ndef run(deck):\n    time.sleep(30)\n")
    monkeypatch.setenv("KLAYOUT_MCP_DRC_TIMEOUT_SECONDS", "1")
    e = expect_code("DRC_RUN_FAILED", tools.run_drc_script, {"session_id": sid, "script_path": str(slow)})
    assert e.details["reason"] == "timeout"
    monkeypatch.setenv("KLAYOUT_BIN", "/nonexistent/klayout")
    ruby = kl_env["allowed"] / "deck.drc"
    ruby.write_text("report('x', $output)\n")
    e = expect_code("DRC_RUN_FAILED", tools.run_drc_script, {"session_id": sid, "script_path": str(ruby),
                                                             "script_type": "ruby"})
    assert e.details["reason"] == "klayout_not_found"


def test_internal_error(kl_env, monkeypatch) -> None:
    blocker = kl_env["tmp"] / "not_a_dir"
    blocker.write_text("the artifact root is a file")
    monkeypatch.setenv("KLAYOUT_MCP_ARTIFACT_ROOT", str(blocker))
    e = expect_code("INTERNAL_ERROR", Tools(SessionStore()).open, kl_env["gds"])
    assert e.details["artifact_root"] == str(blocker)


def test_every_contract_code_is_covered() -> None:
    src = Path(__file__).read_text()
    for code in CONTRACT_CODES:
        assert f'"{code}"' in src, code
    assert len(CONTRACT_CODES) == 13 and os.sep
