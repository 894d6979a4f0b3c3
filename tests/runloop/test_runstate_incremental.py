"""The run state is folded incrementally: one event costs O(log n), not a copy of the
run's per-node and per-execution maps, and every version handed out stays unchanged."""
from __future__ import annotations

import json
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator import runstate as rs
from coordinator.persistent import PMap, PSet, PVector
from coordinator.runstate import RunState, apply, fold


class _Clash:
    """A key whose hash collides with others of the same bucket (the trie's collision lists)."""

    HASHES = {"a": 0, "b": 0, "c": 32, "d": -1, "e": 2**63 - 1, "f": 2**63 - 1}  # a/b, e/f: full collisions

    def __init__(self, name: str) -> None:
        self.name, self.h = name, self.HASHES[name]

    def __hash__(self) -> int:
        return self.h

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Clash) and other.name == self.name

    def __repr__(self) -> str:
        return f"_Clash({self.name!r})"


_keys = st.one_of(st.integers(-2**70, 2**70), st.text(max_size=3),
                  st.builds(_Clash, st.sampled_from("abcdef")))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_keys, st.integers()), max_size=120))
def test_pmap_behaves_as_a_dict_and_old_versions_never_change(ops) -> None:
    model: dict = {}
    m = PMap()
    versions = [(m, {})]
    for k, v in ops:
        m = m.set(k, v)
        model[k] = v
        versions.append((m, dict(model)))
    for pm, d in versions:
        assert len(pm) == len(d) and pm == d and dict(pm.items()) == d
        for k in d:
            assert k in pm and pm[k] == d[k] and pm.get(k) == d[k]
    assert PMap(model) == model


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 30), max_size=60), st.lists(st.integers(0, 60), max_size=20))
def test_pset_and_pvector_versions_are_independent(adds, branch_at) -> None:
    s, sets = PSet(), [frozenset()]
    v, vecs = PVector(), [()]
    for x in adds:
        s = s.add(x)
        sets.append(sets[-1] | {x})
        v = v.append(x)
        vecs.append((*vecs[-1], x))
    pv = [PVector()]
    for x in adds:
        pv.append(pv[-1].append(x))
    for i in branch_at:  # appending to an older version must not show in any other
        i = min(i, len(pv) - 1)
        forked = pv[i].append("fork")
        assert list(forked) == [*vecs[i], "fork"]
    for i, vec in enumerate(pv):
        assert tuple(vec) == vecs[i] and vec == vecs[i] and len(vec) == i
    assert s == sets[-1] and frozenset(sets[-1]) == s and len(s) == len(sets[-1])


_topics = st.sampled_from([rs.RUN_STARTED, rs.SCHEDULING_DECISION, rs.TASK_DISPATCHED, rs.TASK_COMPLETED,
                           rs.TASK_FAILED, rs.TASK_TIMEOUT, rs.TASK_LOST, rs.TASK_CANCELLED, rs.TASK_ACK,
                           rs.PATCH_SUBMITTED, rs.RUN_FINISHED])


def _ev(seq, topic, node, neid, outcome):
    return {"sequence": seq, "run_id": "r", "topic": topic, "node_id": node, "node_execution_id": neid,
            "payload": {"outcome": outcome, "node_execution_id": neid, "error": {"code": "E"}}}


def _plain(s: RunState) -> dict:
    """A RunState as plain values (what a from-scratch fold with dicts would hold)."""
    return {"run_id": s.run_id, "nodes": {k: v for k, v in s.nodes.items()},
            "executions": {k: dict(v) for k, v in s.executions.items()}, "ended": set(s.ended),
            "waves": s.waves, "total": s.total_attempts, "lost": s.lost_attempts, "seq": s.last_sequence,
            "finished": s.finished, "proposals": list(s.proposals), "active": s.active_executions()}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_topics, st.sampled_from([f"n{i}" for i in range(6)]),
                          st.sampled_from([f"x{i}" for i in range(12)]), st.sampled_from(["succeeded", "failed"])),
                max_size=80), st.integers(0, 80))
def test_incremental_fold_equals_a_from_scratch_fold(items, cut) -> None:
    """Applying events one by one (the run loop), folding all at once (--resume), and
    resuming a fold from any intermediate state give the same state; no state handed
    out earlier changes as later events arrive."""
    events = [_ev(i, *it) for i, it in enumerate(items, start=1)]
    live, seen = RunState(), []
    for e in events:
        live = apply(live, e)
        seen.append((live, json.dumps(_plain(live), sort_keys=True, default=str)))
    assert fold(events) == live
    cut = min(cut, len(events))
    assert fold(events[cut:], fold(events[:cut])) == live
    for state, snap in seen:  # earlier versions are untouched by later applies
        assert json.dumps(_plain(state), sort_keys=True, default=str) == snap
    for i, (state, _) in enumerate(seen, start=1):
        assert fold(events[:i]) == state


def _big_run(n: int) -> RunState:
    events = []
    for i in range(n):
        events.append(_ev(2 * i + 1, rs.TASK_DISPATCHED, f"n{i:06d}", f"x{i:06d}", ""))
        events.append(_ev(2 * i + 2, rs.TASK_COMPLETED, f"n{i:06d}", f"x{i:06d}", "succeeded"))
    # the run loop's state is persistent from its first apply on (a resumed run's fold is converted once)
    return apply(fold(events), _ev(2 * n + 1, "x.none", None, None, ""))


def _apply_cost(state: RunState) -> float:
    ev = _ev(10**7, rs.TASK_DISPATCHED, "fresh", "fresh-x", "")
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(200):
            apply(state, ev)
        best = min(best, time.perf_counter() - t0)
    return best / 200


def test_one_event_costs_the_same_at_20000_nodes_as_at_200() -> None:
    """Copying the maps would make the large run's event ~100x dearer; a persistent
    update costs a trie path more at most."""
    small, large = _big_run(200), _big_run(20_000)
    assert len(large.nodes) == 20_000 and len(large.ended) == 20_000
    ratio = _apply_cost(large) / _apply_cost(small)
    assert ratio < 4, ratio


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_topics, st.sampled_from([f"n{i}" for i in range(6)]),
                          st.sampled_from([f"x{i}" for i in range(12)]), st.sampled_from(["succeeded", "failed"])),
                max_size=60), st.lists(st.integers(1, 9), max_size=20))
def test_a_transactions_records_applied_in_one_step_equal_applying_each(items, sizes) -> None:
    """`apply_many` (the writer applies a transaction's records at once): the same state as
    one `apply` per event, from any state, and no state handed out before changes."""
    events = [_ev(i, *it) for i, it in enumerate(items, start=1)]
    one, many, k, seen = RunState(), RunState(), 0, []
    for size in sizes + [len(events)]:
        chunk, k = events[k:k + size], k + size
        for e in chunk:
            one = apply(one, e)
        many = rs.apply_many(many, chunk)
        assert many == one
        seen.append((many, json.dumps(_plain(many), sort_keys=True, default=str)))
    for state, snap in seen:
        assert json.dumps(_plain(state), sort_keys=True, default=str) == snap
