"""The live page's tile map (the report's drawing code) and `dome run --log-format json`."""
from __future__ import annotations

import json
import re

import pytest

from coordinator.report.svg import Attempt
from coordinator.report.tiles import node_states, tile_map_svg, tiles_of_queue


def _queue() -> dict:
    def task(nid: str, tiles: list[str]) -> dict:
        return {"node_id": nid, "action_spec": {"intent": "litho.optimize",
                                                "params": {"tiling": {"dir": "t", "tiles": tiles}}}}
    return {"tasks": [task("w0", ["T_0_0", "T_0_2"]), task("w1", ["T_2_0", "T_2_2"]), {"node_id": "stitch"}]}


def test_tile_map_colours_each_tile_by_its_task() -> None:
    tiles = tiles_of_queue(_queue())
    assert tiles == {"T_0_0": "w0", "T_0_2": "w0", "T_2_0": "w1", "T_2_2": "w1"}
    states = node_states([Attempt("w0", "a1", 0, 1, "failed", 1, 1), Attempt("w0", "a2", 1, 2, "completed", 2, 2)])
    assert states == {"w0": "completed"}
    svg = tile_map_svg(tiles, states)
    cells = dict(re.findall(r'data-tile="([^"]+)" data-state="([^"]+)"', svg))
    assert cells == {"T_0_0": "completed", "T_0_2": "completed", "T_2_0": "pending", "T_2_2": "pending"}
    assert tile_map_svg({}, {}) == ""


def test_live_fragment_shows_the_tile_map_of_a_tiled_run_only() -> None:
    from coordinator.serve.page import live_fragment
    from coordinator.report.model import build_model

    m = build_model("r", [])
    assert "tile map" in live_fragment(m, _queue()) and 'data-tile="T_2_2"' in live_fragment(m, _queue())
    assert "Tile map" not in live_fragment(m, {"tasks": []})


@pytest.mark.slow
def test_run_log_format_json_is_one_object_per_line_with_ids(git_repo, ops_root, tmp_path) -> None:
    from tests.conftest import dome_cli
    from tests.runloop.conftest import cmd_task, write_queue

    q = write_queue(tmp_path, git_repo, [cmd_task("a", "echo a > a.txt")])
    res = dome_cli("run", str(q), "--ops-root", str(ops_root), "--sandbox", "none", "--json", "--log-format", "json",
                   timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    run_id = json.loads(res.stdout)["run_id"]
    lines = [json.loads(x) for x in res.stderr.splitlines()]  # every stderr line is one JSON object
    events = [x for x in lines if x["msg"] != "run.verdict"]
    ledger = json.loads("[" + ",".join(dome_cli("events", run_id, "--ops-root", str(ops_root), "--json")
                                       .stdout.splitlines()) + "]")
    assert [(x["sequence"], x["msg"]) for x in events] == [(e["sequence"], e["topic"]) for e in ledger]
    dispatched = next(x for x in events if x["msg"] == "task.dispatched")
    assert dispatched["run_id"] == run_id and dispatched["attempt_id"] == dispatched["node_execution_id"]
    assert dispatched["wave_id"] and dispatched["trace_id"]
    assert lines[-1]["msg"] == "run.verdict" and lines[-1]["lines"]
