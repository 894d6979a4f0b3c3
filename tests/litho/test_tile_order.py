"""Tile tasks are dispatched most-blocking first (then rarest) by the ordinary scheduler, on a real tile queue graph."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from coordinator import runstate as rs
from coordinator.scheduler import SchedulerPolicy, decide, statuses
from coordinator.workqueue import parse_work_queue
from tests.runloop.test_scheduler import Sim
from worker_sdk.litho.engine import plan_tiles
from worker_sdk.litho.tiled import TilePlan
from worker_sdk.litho.tilequeue import batches, tile_blocking, tile_queue

CLIP, HALO = 2048, 512


def grid(rows: int, cols: int) -> TilePlan:
    core = CLIP - 2 * HALO
    tiles = plan_tiles(cols * core, rows * core, CLIP, HALO)
    return TilePlan(CLIP, HALO, 480, (HALO, HALO), (rows * core, cols * core), "lithobench", tuple(tiles))


def queue(plan: TilePlan, batch_size: int, clean_in_waves: bool = True) -> dict:
    return tile_queue(plan, layout="l.oas", out="m.oas", tile_dir="m.tiles", kernels="k", name="order",
                      batch_size=batch_size, iterations=2, clean_in_waves=clean_in_waves)


def test_tile_blocking_counts_every_later_wave_tile_that_waits():
    # waves: (row % 2) * 2 + col % 2; a tile waits for its neighbours of earlier waves
    assert tile_blocking(grid(3, 3)) == {"T_0_0": 4, "T_0_1": 3, "T_0_2": 4, "T_1_0": 1, "T_1_1": 0, "T_1_2": 1,
                                         "T_2_0": 4, "T_2_1": 3, "T_2_2": 4}
    row = grid(1, 4)
    assert tile_blocking(row) == {"T_0_0": 1, "T_0_1": 0, "T_0_2": 2, "T_0_3": 0}
    # wave 0 is cut most-blocking first: T_0_2 (two tiles wait for it) before T_0_0 (one)
    assert batches(row, 1) == [(0, ["T_0_2"]), (0, ["T_0_0"]), (1, ["T_0_1"]), (1, ["T_0_3"])]
    q = queue(row, 1)
    assert [t["priority_group"] for t in q["tasks"][:4]] == [0, 0, 1, 1]


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 5), cols=st.integers(1, 5), batch_size=st.integers(1, 4), slots=st.integers(1, 4),
       data=st.data())
def test_property_dispatch_is_topological_and_most_blocking_first(rows, cols, batch_size, slots, data):
    plan = grid(rows, cols)
    q = queue(plan, batch_size)
    # within a wave the batches are cut from the tiles most-blocking first
    blocking = tile_blocking(plan)
    for w in range(4):
        seq = [blocking[tid] for wave, ids in batches(plan, batch_size) if wave == w for tid in ids]
        assert seq == sorted(seq, reverse=True)
    order = dispatch_order(q, slots, lambda n: data.draw(st.integers(0, n - 1)))
    assert order[-2:] == ["stitch", "evaluate"]


def dispatch_order(q: dict, slots: int, pick) -> list[str]:
    """Run the scheduler over a tile queue, finishing the active task `pick(len(active))` after each
    pass; check every pass and return the dispatch order."""
    graph = parse_work_queue({**q, "repo": "."}).graph
    deps = {t["node_id"]: set(t["dependencies"]) for t in q["tasks"]}
    sim, done, order, active = Sim(), set(), [], []
    policy = SchedulerPolicy(max_parallel=slots)
    wave = 0
    while len(done) < len(deps):
        st_now = statuses(graph, sim.state)
        d = decide(graph, sim.state, policy, 3, wave, status=st_now)
        if d is not None:
            wave += 1
            picked = [e["scores"]["blocking"] for e in d["selected"]]
            assert picked == sorted(picked, reverse=True)  # non-increasing within a scheduling wave
            chosen = {e["node_id"] for e in d["selected"]}
            left = [graph.descendants[n] * 1000 for n, s in st_now.items() if s == "ready" and n not in chosen]
            assert not left or min(picked) >= max(left)  # nothing deferred blocks more than what went
            for nid, neid in sim.dispatch(d):
                assert deps[nid] <= done  # topological: every dependency finished before dispatch
                order.append(nid)
                active.append((nid, neid))
        assert active
        nid, neid = active.pop(pick(len(active)))
        sim.add(rs.TASK_COMPLETED, nid, node_execution_id=neid, outcome="succeeded")
        done.add(nid)
    assert sorted(order) == sorted(deps)
    return order


def test_the_fullchip_quick_queue_dispatches_its_most_blocking_batches_first():
    import json

    from tests.conftest import REPO_ROOT

    q = json.loads((REPO_ROOT / "examples" / "fullchip" / "work.quick.json").read_text())
    order = dispatch_order(q, q["scheduling"]["max_parallel"], lambda n: 0)  # the oldest task finishes first
    graph = parse_work_queue({**q, "repo": "."}).graph
    blocking = [graph.descendants[n] for n in order]
    assert order[:2] == ["tiles-w0-b0", "tiles-w0-b1"] and blocking[0] >= blocking[1] > blocking[2]
    assert order[-2:] == ["stitch", "evaluate"]


def test_among_equally_blocking_tile_tasks_the_rarest_resource_goes_first():
    plan = grid(1, 4)  # wave 0: T_0_0, T_0_2; wave 1: T_0_1, T_0_3 (batches of one tile)
    q = queue(plan, 1, clean_in_waves=False)  # without clean-up tasks, whose edges differ at the row's end
    tiles = [t for t in q["tasks"] if t["node_id"].startswith("tiles-w1-")]
    assert len(tiles) == 2
    rare = tiles[-1]
    rare["containers"] = ["gpu-worker@sha256:" + "0" * 64]  # one batch routed to a scarce image
    graph = parse_work_queue({**q, "repo": "."}).graph
    assert graph.descendants[tiles[0]["node_id"]] == graph.descendants[rare["node_id"]]
    sim = Sim()
    first = decide(graph, sim.state, SchedulerPolicy(max_parallel=8), 3, 0)
    for nid, neid in sim.dispatch(first):
        sim.add(rs.TASK_COMPLETED, nid, node_execution_id=neid, outcome="succeeded")
    second = decide(graph, sim.state, SchedulerPolicy(max_parallel=8), 3, 1)
    assert [e["node_id"] for e in second["selected"]][0] == rare["node_id"]


def test_a_straggling_tile_task_gets_an_endgame_duplicate_once_nothing_else_is_ready():
    plan = grid(1, 3)  # wave 0: T_0_0, T_0_2; wave 1: T_0_1 (batches of one tile)
    q = queue(plan, 1)
    assert q["scheduling"]["endgame_max_duplicates"] == 1
    wq = parse_work_queue({**q, "repo": "."})
    graph = wq.graph
    policy = SchedulerPolicy.from_work_queue(q["scheduling"], {})
    sim = Sim()
    first = decide(graph, sim.state, policy, 3, 0)
    assert [e["node_id"] for e in first["selected"]] == ["tiles-w0-b0", "tiles-w0-b1"]
    (a, neid), _ = sim.dispatch(first)
    sim.add(rs.TASK_COMPLETED, a, node_execution_id=neid, outcome="succeeded")
    # one wave-0 task still runs, the wave-1 task waits for it and a slot is free: the straggler is duplicated
    second = decide(graph, sim.state, policy, 3, 1)
    assert second["endgame"] and [(e["node_id"], e["kind"]) for e in second["selected"]] == \
        [("tiles-w0-b1", "endgame_duplicate")]
    # with duplicates off (the quick variant on 2-core machines), the slot stays free
    off = SchedulerPolicy.from_work_queue({**q["scheduling"], "endgame_max_duplicates": 0}, {})
    assert decide(graph, sim.state, off, 3, 1) is None or decide(graph, sim.state, off, 3, 1)["selected"] == []
    # stitch and evaluation are never duplicated
    assert [t.get("endgame_duplicates") for t in q["tasks"][-2:]] == [0, 0]
