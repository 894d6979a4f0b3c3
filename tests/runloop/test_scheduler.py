"""The pure scheduler: priorities, tie-breaks, endgame, determinism (property tests)."""
from __future__ import annotations

import random

from hypothesis import given, settings, strategies as st

from coordinator import runstate as rs
from coordinator.runstate import fold
from coordinator.scheduler import DETERMINISTIC_FAILURES, SchedulerPolicy, decide, statuses
from coordinator.workqueue import parse_work_queue
from registry.canonical import canonical_json


def wq(tasks, **extra):
    return parse_work_queue({"artifact_kind": "dome.work.queue/v1", "repo": ".", "base_ref": "main",
                             "determinism_seed": 3, "policy": "default", "promote_to": "refs/heads/out", "tasks": tasks,
                             **extra})


def t(nid, deps=(), **extra):
    return {"node_id": nid, "dependencies": list(deps), "containers": [], "required_capabilities": ["write"],
            "required_outputs": ["patch_proposal"],
            "action_spec": {"intent": "command", "argv": ["true"]}, **extra}


class Sim:
    """Feeds synthetic ledger events through the same fold the run loop uses."""

    def __init__(self):
        self.events = []
        self.n = 0

    def add(self, topic, node_id=None, **payload):
        self.n += 1
        self.events.append({"topic": topic, "sequence": self.n, "node_id": node_id, "payload": payload})

    @property
    def state(self):
        return fold(self.events)

    def dispatch(self, decision):
        self.add(rs.SCHEDULING_DECISION, **decision)
        out = []
        for e in decision["selected"]:
            neid = f"x{self.n}-{e['node_id']}"
            self.add(rs.TASK_DISPATCHED, e["node_id"], node_execution_id=neid, kind=e["kind"])
            out.append((e["node_id"], neid))
        return out


def test_most_blocking_first_then_tie_breaks():
    g = wq([t("leaf1"), t("leaf2"), t("hub"), t("x", ["hub"]), t("y", ["hub"]),
            t("zz", priority_group=0), t("aa", priority_group=1)]).graph
    d = decide(g, fold([]), SchedulerPolicy(max_parallel=10), 3, 1)
    order = [e["node_id"] for e in d["selected"]]
    assert order[0] == "hub"  # unlocks two nodes
    # equal scores: priority group 0 before 1, then node_id
    assert order.index("leaf1") < order.index("leaf2") < order.index("zz") < order.index("aa")
    e = d["selected"][0]
    assert set(e["scores"]) == {"blocking", "rarity", "confidence", "risk_penalty", "total"}
    assert set(e["tie_break"]) == {"node_priority_group", "node_id", "task_spec_digest"}


def test_rarity_and_risk_shape_the_order():
    gpu = ["reg/litho@sha256:" + "a" * 64]
    g = wq([t("common1"), t("common2"), t("rare", containers=gpu), t("risky", risk="high")]).graph
    d = decide(g, fold([]), SchedulerPolicy(max_parallel=10), 3, 1)
    order = [e["node_id"] for e in d["selected"]]
    assert order[0] == "rare" and order[-1] == "risky"


def test_failures_lower_confidence_and_exhaust_retries():
    g = wq([t("a", max_attempts=2), t("b")]).graph
    sim = Sim()
    pol = SchedulerPolicy(max_parallel=1)
    (nid, neid), = sim.dispatch(decide(g, sim.state, pol, 3, 1))
    assert nid == "a"
    sim.add(rs.TASK_FAILED, nid, node_execution_id=neid)
    d = decide(g, sim.state, pol, 3, 2)
    assert d["selected"][0]["node_id"] == "b"  # a's confidence dropped
    (nid, neid), = sim.dispatch(d)
    sim.add(rs.TASK_COMPLETED, nid, node_execution_id=neid, outcome="succeeded")
    d = decide(g, sim.state, pol, 3, 3)
    assert d["selected"][0] == {**d["selected"][0], "node_id": "a", "kind": "retry", "attempt": 2}
    (nid, neid), = sim.dispatch(d)
    sim.add(rs.TASK_TIMEOUT, nid, node_execution_id=neid)
    assert statuses(g, sim.state)["a"] == "failed"
    assert decide(g, sim.state, pol, 3, 4) is None


def test_endgame_duplicates_last_blockers_bounded():
    g = wq([t("a"), t("b"), t("c", ["a"])]).graph
    sim = Sim()
    pol = SchedulerPolicy(max_parallel=4, endgame_threshold=3, endgame_max_duplicates=1)
    first = sim.dispatch(decide(g, sim.state, pol, 3, 1))
    assert [n for n, _ in first] == ["a", "b"]
    d = decide(g, sim.state, pol, 3, 2)
    assert d["endgame"] and [e["kind"] for e in d["selected"]] == ["endgame_duplicate"] * 2
    sim.dispatch(d)
    assert decide(g, sim.state, pol, 3, 3) is None  # bounded: one duplicate per node at a time
    # the first valid result wins; the loser's late result changes nothing
    sim.add(rs.TASK_COMPLETED, "a", node_execution_id=first[0][1], outcome="succeeded")
    assert sim.state.node("a").succeeded_by == first[0][1]


def test_endgame_duplicates_are_opt_in():
    """Without `endgame_max_duplicates` in the queue, a small queue runs each task once."""
    g = wq([t("a"), t("b")]).graph
    assert SchedulerPolicy().endgame_max_duplicates == 0
    sim = Sim()
    pol = SchedulerPolicy(max_parallel=4, endgame_threshold=3)
    assert [n for n, _ in sim.dispatch(decide(g, sim.state, pol, 3, 1))] == ["a", "b"]
    assert decide(g, sim.state, pol, 3, 2) is None  # two idle slots, both tasks running: no duplicates


def test_a_task_turns_endgame_duplicates_on_for_itself():
    """The queue leaves duplicates off; task a asks for two: only a is duplicated, two at a time."""
    g = wq([t("a", endgame_duplicates=2, max_attempts=3), t("b")]).graph
    assert g.nodes["a"].endgame_duplicates == 2 and g.nodes["b"].endgame_duplicates is None
    sim = Sim()
    pol = SchedulerPolicy(max_parallel=5, endgame_threshold=3)
    sim.dispatch(decide(g, sim.state, pol, 3, 1))
    d = decide(g, sim.state, pol, 3, 2)
    assert d["endgame"] and [(e["node_id"], e["kind"]) for e in d["selected"]] == [("a", "endgame_duplicate")]
    sim.dispatch(d)
    d = decide(g, sim.state, pol, 3, 3)
    assert [e["node_id"] for e in d["selected"]] == ["a"]
    sim.dispatch(d)
    assert decide(g, sim.state, pol, 3, 4) is None  # a: 1 + 2 in flight; b: never duplicated
    assert len(sim.state.node("a").active) == 3 and len(sim.state.node("b").active) == 1


def test_a_task_turns_endgame_duplicates_off_for_itself():
    """The queue asks for duplicates; a paid task says 0: it runs once, the other is duplicated."""
    g = wq([t("paid", endgame_duplicates=0), t("cheap")], scheduling={"endgame_max_duplicates": 1}).graph
    sim = Sim()
    pol = SchedulerPolicy.from_work_queue({"max_parallel": 4, "endgame_threshold": 3, "endgame_max_duplicates": 1},
                                          {})
    sim.dispatch(decide(g, sim.state, pol, 3, 1))
    d = decide(g, sim.state, pol, 3, 2)
    assert [(e["node_id"], e["kind"]) for e in d["selected"]] == [("cheap", "endgame_duplicate")]
    sim.dispatch(d)
    assert decide(g, sim.state, pol, 3, 3) is None


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(DETERMINISTIC_FAILURES)), st.integers(1, 8), st.integers(2, 5))
def test_property_a_deterministic_failure_stops_duplicates_of_its_node(code, dups, max_attempts):
    """One attempt of a duplicated node fails with an error that recurs on every try:
    while its twin still runs, no further duplicate or retry is dispatched."""
    g = wq([t("a", endgame_duplicates=dups, max_attempts=max_attempts)]).graph
    sim = Sim()
    pol = SchedulerPolicy(max_parallel=16, endgame_threshold=3)
    (_, first), = sim.dispatch(decide(g, sim.state, pol, 3, 1))
    sim.dispatch(decide(g, sim.state, pol, 3, 2))  # one duplicate of a
    sim.add(rs.TASK_COMPLETED, "a", node_execution_id=first, outcome="failed",
            error={"code": code, "message": "x", "retry": "none"})
    assert statuses(g, sim.state)["a"] == "running"  # its twin is still going
    assert decide(g, sim.state, pol, 3, 3) is None


def test_work_queue_task_endgame_duplicates_is_checked_with_a_did_you_mean():
    import pytest

    from coordinator.workqueue import WorkQueueUnknownField
    from registry.errors import DomeError
    with pytest.raises(WorkQueueUnknownField) as err:
        wq([t("a", endgame_duplicate=1)])
    assert err.value.message == "unknown field 'endgame_duplicate' at /tasks/0; did you mean 'endgame_duplicates'?"
    for bad in (9, -1, "2"):
        with pytest.raises(DomeError) as bad_err:
            wq([t("a", endgame_duplicates=bad)])
        assert bad_err.value.code == "SCHEMA_VALIDATION_ERROR", bad
        assert "/tasks/0/endgame_duplicates" in bad_err.value.message


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(DETERMINISTIC_FAILURES)), st.integers(2, 5), st.integers(0, 3))
def test_property_deterministic_failures_are_never_retried(code, max_attempts, dups):
    g = wq([t("a", max_attempts=max_attempts), t("b", ["a"])]).graph
    sim = Sim()
    pol = SchedulerPolicy(max_parallel=4, endgame_threshold=3, endgame_max_duplicates=dups)
    (nid, neid), = sim.dispatch(decide(g, sim.state, pol, 3, 1))
    sim.add(rs.TASK_COMPLETED, nid, node_execution_id=neid, outcome="failed",
            error={"code": code, "message": "x", "retry": "none"})
    assert statuses(g, sim.state) == {"a": "failed", "b": "blocked"}
    assert decide(g, sim.state, pol, 3, 2) is None
    assert fold(sim.events).node("a").last_error == code  # replay gives the same verdict


def test_other_failures_are_retried_up_to_max_attempts():
    g = wq([t("a", max_attempts=3)]).graph
    sim = Sim()
    pol = SchedulerPolicy(max_parallel=1)
    for attempt in (1, 2, 3):
        d = decide(g, sim.state, pol, 3, attempt)
        assert d is not None and d["selected"][0]["attempt"] == attempt
        (nid, neid), = sim.dispatch(d)
        sim.add(rs.TASK_COMPLETED, nid, node_execution_id=neid, outcome="failed",
                error={"code": "COMMAND_FAILED", "message": "exit 1", "retry": "light"})
    assert statuses(g, sim.state)["a"] == "failed" and decide(g, sim.state, pol, 3, 4) is None


def test_blocked_descendants_of_failed_nodes():
    g = wq([t("a", max_attempts=1), t("b", ["a"]), t("c", ["b"])]).graph
    sim = Sim()
    (nid, neid), = sim.dispatch(decide(g, sim.state, SchedulerPolicy(), 3, 1))
    sim.add(rs.TASK_FAILED, nid, node_execution_id=neid)
    assert statuses(g, sim.state) == {"a": "failed", "b": "blocked", "c": "blocked"}


dag = st.integers(min_value=1, max_value=14).flatmap(
    lambda n: st.lists(st.lists(st.integers(0, n - 1), max_size=3), min_size=n, max_size=n))


@settings(max_examples=80, deadline=None)
@given(dag, st.integers(1, 5), st.integers(0, 2**32 - 1), st.integers(0, 3))
def test_property_schedule_respects_deps_slots_and_is_deterministic(edges, slots, order_seed, dups):
    # node i may depend only on lower-numbered nodes: always a DAG
    tasks = [t(f"n{i:02d}", sorted({f"n{j:02d}" for j in deps if j < i})) for i, deps in enumerate(edges)]
    g = wq(tasks).graph
    pol = SchedulerPolicy(max_parallel=slots, endgame_threshold=2, endgame_max_duplicates=dups)
    rnd = random.Random(order_seed)
    sim = Sim()
    running: list[tuple[str, str]] = []
    wave = 0
    for _ in range(10 * len(tasks) + 10):
        state = sim.state
        wave += 1
        d = decide(g, state, pol, 3, wave)
        again = decide(g, fold(list(sim.events)), pol, 3, wave)
        assert canonical_json(d) == canonical_json(again)  # byte-identical
        if d is not None:
            active = sum(len(state.node(n).active) for n in g.nodes)
            assert len(d["selected"]) <= slots - active
            for e in d["selected"]:
                if e["kind"] != "endgame_duplicate":
                    assert all(state.node(x).succeeded for x in g.nodes[e["node_id"]].dependencies)
                    assert not state.node(e["node_id"]).active
                else:
                    assert d["endgame"] and len(state.node(e["node_id"]).active) <= dups
            running += sim.dispatch(d)
        if not running:
            break
        nid, neid = running.pop(rnd.randrange(len(running)))
        sim.add(rs.TASK_COMPLETED, nid, node_execution_id=neid, outcome="succeeded")
    assert all(s == "succeeded" for s in statuses(g, sim.state).values())


def test_out_of_profile_is_never_retried():
    """A grant without a method the intent calls (OUT_OF_PROFILE) would be issued the same on a
    retry: the node fails at its first such attempt instead of three."""
    g = wq([t("a", max_attempts=3)]).graph
    sim = Sim()
    pol = SchedulerPolicy(max_parallel=1)
    (nid, neid), = sim.dispatch(decide(g, sim.state, pol, 3, 1))
    sim.add(rs.TASK_COMPLETED, nid, node_execution_id=neid, outcome="failed",
            error={"code": "OUT_OF_PROFILE", "message": "method 'submit_patch' is not in this worker's grant",
                   "retry": "none"})
    assert statuses(g, sim.state) == {"a": "failed"} and decide(g, sim.state, pol, 3, 2) is None
