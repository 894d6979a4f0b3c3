"""The incremental ready set decides exactly what the full re-score decides
(hypothesis over random graphs, policies and event sequences: successes,
failures, deterministic failures, timeouts, lost attempts, acks, endgame)."""
from __future__ import annotations

import random

from hypothesis import given, settings, strategies as st

from coordinator import runstate as rs
from coordinator.ready_set import ReadySet
from coordinator.runstate import fold
from coordinator.scheduler import SchedulerPolicy, decide, statuses
from registry.canonical import canonical_json
from tests.runloop.test_scheduler import t, wq

dag = st.integers(min_value=1, max_value=16).flatmap(
    lambda n: st.lists(st.lists(st.integers(0, n - 1), max_size=3), min_size=n, max_size=n))
OUTCOMES = ("ok", "ok", "ok", "fail", "timeout", "lost", "deterministic", "late")


def _tasks(edges, rnd: random.Random) -> list[dict]:
    risks = ("low", "medium", "high")
    return [t(f"n{i:02d}", sorted({f"n{j:02d}" for j in deps if j < i}), max_attempts=rnd.randint(1, 3),
              risk=rnd.choice(risks), priority_group=rnd.randint(0, 2),
              **({"containers": ["reg/litho@sha256:" + "a" * 64]} if rnd.random() < 0.3 else {}))
            for i, deps in enumerate(edges)]


@settings(max_examples=120, deadline=None)
@given(dag, st.integers(1, 5), st.integers(0, 2**32 - 1), st.integers(0, 2), st.one_of(st.none(), st.integers(1, 40)))
def test_property_ready_set_decides_as_the_full_rescore(edges, slots, seed, dups, max_total):
    rnd = random.Random(seed)
    g = wq(_tasks(edges, rnd)).graph
    pol = SchedulerPolicy(max_parallel=slots, endgame_threshold=2, endgame_max_duplicates=dups,
                          max_total_attempts=max_total)
    events: list[dict] = []
    state = fold([])
    ready = ReadySet(g, state)

    def add(topic, node_id=None, **payload):
        nonlocal state
        ev = {"topic": topic, "sequence": len(events) + 1, "node_id": node_id, "payload": payload}
        if rnd.random() < 0.3:  # some records name only their node execution
            ev = {**ev, "node_id": None, "node_execution_id": payload.get("node_execution_id")}
        events.append(ev)
        state = rs.apply(state, ev)
        ready.note(ev, state)

    running: list[tuple[str, str]] = []
    ended: list[tuple[str, str]] = []
    for wave in range(1, 12 * len(g.nodes) + 10):
        full = decide(g, state, pol, 3, wave)
        inc = ready.decide(state, pol, 3, wave)
        assert canonical_json(inc) == canonical_json(full)
        assert ready.status == statuses(g, state)
        assert ready.done() == all(s in ("succeeded", "failed", "blocked") for s in ready.status.values())
        if full is not None:
            add(rs.SCHEDULING_DECISION, **{"wave_id": full["wave_id"]})
            for e in full["selected"]:
                neid = f"x{len(events)}-{e['node_id']}"
                events.append({"topic": rs.TASK_DISPATCHED, "sequence": len(events) + 1, "node_id": e["node_id"],
                               "payload": {"node_execution_id": neid}})
                state = rs.apply(state, events[-1])
                ready.note(events[-1], state)
                running.append((e["node_id"], neid))
        if not running:
            break
        nid, neid = running.pop(rnd.randrange(len(running)))
        outcome = rnd.choice(OUTCOMES)
        if outcome == "late" and ended:  # a duplicate terminal event for an ended attempt changes nothing
            add(rs.TASK_COMPLETED, ended[-1][0], node_execution_id=ended[-1][1], outcome="succeeded")
            running.append((nid, neid))
            continue
        if outcome in ("ok", "late"):
            add(rs.TASK_COMPLETED, nid, node_execution_id=neid, outcome="succeeded")
            if rnd.random() < 0.5:
                add(rs.TASK_ACK, nid, node_execution_id=neid)
        elif outcome == "fail":
            add(rs.TASK_FAILED, nid, node_execution_id=neid, error={"code": "BOOM"})
        elif outcome == "deterministic":
            add(rs.TASK_FAILED, nid, node_execution_id=neid, error={"code": "COMMAND_NOT_FOUND"})
        elif outcome == "timeout":
            add(rs.TASK_TIMEOUT, nid, node_execution_id=neid)
        else:
            add(rs.TASK_LOST, nid, node_execution_id=neid)
        ended.append((nid, neid))


def test_ready_set_of_a_resumed_state_starts_from_the_fold():
    """Built from a folded state (what --resume has), the set agrees at once."""
    g = wq([t("a"), t("b", ["a"]), t("c", ["a"]), t("d", ["b", "c"])]).graph
    evs = [{"topic": rs.TASK_DISPATCHED, "sequence": 1, "node_id": "a", "payload": {"node_execution_id": "e1"}},
           {"topic": rs.TASK_COMPLETED, "sequence": 2, "node_id": "a",
            "payload": {"node_execution_id": "e1", "outcome": "succeeded"}}]
    state = fold(evs)
    pol = SchedulerPolicy(max_parallel=1)
    ready = ReadySet(g, state)
    assert ready.status == statuses(g, state) and ready.counts["ready"] == 2
    assert canonical_json(ready.decide(state, pol, 1, 1)) == canonical_json(decide(g, state, pol, 1, 1))
