"""The fullchip benchmarks' figures are read right from a run's events (pure functions, no run)."""
from __future__ import annotations

from benchmarks import fullchip_block, ray_tiles


def _ev(seq: int, topic: str, node: str | None, ts: float, neid: str | None = None, **payload) -> dict:
    secs = int(ts)
    return {"sequence": seq, "topic": topic, "node_id": node, "node_execution_id": neid,
            "ts": f"2026-11-28T08:00:{secs:02d}.{int(round((ts - secs) * 1e6)):06d}Z", "payload": payload}


EVENTS = [
    _ev(1, "run.started", None, 0.0),
    _ev(2, "task.dispatched", "tiles-w0-b0", 1.0, "a1", node_execution_id="a1"),
    _ev(3, "task.dispatched", "tiles-w0-b1", 1.5, "a2", node_execution_id="a2"),
    _ev(4, "task.completed", "tiles-w0-b0", 11.0, "a1",
        summary={"tiles_run": ["T_0_0", "T_0_2"], "seconds": {"tiles": 6.0}, "peak_rss_mb": 600.0}),
    _ev(5, "task.failed", "tiles-w0-b1", 5.0, "a2"),
    _ev(6, "task.dispatched", "tiles-w0-b1", 6.0, "a3", node_execution_id="a3"),
    _ev(7, "task.completed", "tiles-w0-b1", 13.0, "a3",
        summary={"tiles_run": ["T_1_0"], "tiles_restored": ["T_1_2"], "seconds": {"tiles": 3.0}, "peak_rss_mb": 650.0}),
    _ev(8, "task.dispatched", "clean-w0-b0", 13.5, "a4", node_execution_id="a4"),
    _ev(9, "task.completed", "clean-w0-b0", 17.5, "a4",
        summary={"tiles_run": [], "seconds": {"tiles": 0.0, "clean": 2.5}, "peak_rss_mb": 500.0}),
    _ev(10, "task.dispatched", "stitch", 18.0, "a5", node_execution_id="a5"),
    _ev(11, "task.completed", "stitch", 38.0, "a5", summary={"metrics": {}}),
    _ev(12, "run.finished", None, 40.0, status="promoted", cost={"total_cpu_s": 50.0}),
]


def test_phases_group_task_walls_by_kind_and_add_the_stitch_report():
    report = {"tiling": {"seconds": {"clean": 0.0, "stitch": 1.5, "evaluate": 9.0}, "peak_rss_mb": 590.0}}
    ph = fullchip_block.phases(EVENTS, report)
    assert ph["wall_s"] == 40.0 and ph["status"] == "promoted" and ph["cost"] == {"total_cpu_s": 50.0}
    assert ph["tiles"] == 3 and ph["tiles_per_s"] == round(3 / 40.0, 4)  # restored tiles are not counted again
    # each attempt's wall from its own dispatch; the failed attempt has no completion and no wall
    assert ph["tasks"] == {"tiles": {"n": 2, "wall_s": 17.0, "max_s": 10.0}, "clean": {"n": 1, "wall_s": 4.0, "max_s": 4.0},
                           "stitch": {"n": 1, "wall_s": 20.0, "max_s": 20.0}}
    assert ph["worker_s"] == {"clean": 2.5, "stitch.clean": 0.0, "stitch.evaluate": 9.0, "stitch.stitch": 1.5, "tiles": 9.0}
    assert ph["peak_rss_mb"] == {"tiles": 650.0, "clean": 500.0, "stitch": 590.0}


def test_tile_rate_runs_from_the_first_dispatch_to_the_last_completion():
    r = ray_tiles.tile_rate(EVENTS)
    assert r["tiles"] == 3 and r["span_s"] == 37.0 and r["tiles_per_s"] == round(3 / 37.0, 4)
    assert r["task_mean_s"] == 8.5 and r["status"] == "promoted"
