"""Replay folds a run deterministically into have/need state."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import EventDraft, Ledger
from ledger.record import build
from ledger.replay import REDUCERS, fold, reducer, state_digest
from tests.ledger.conftest import append_sample_run


def test_fold_tracks_attempts_have_need_proposals_and_decisions(ledger, signer) -> None:
    append_sample_run(ledger, signer=signer)
    state = fold(ledger.events("run-1"))
    assert state.run_id == "run-1" and state.status == "running"
    assert state.have == ["n1"] and state.need == ["n2"]
    assert state.tasks["n1"]["succeeded_by"] == "n1:1" and state.tasks["n1"]["acked"]
    assert state.tasks["n1"]["have"] == ["patch:p1"]
    assert state.tasks["n2"]["attempts"] == ["n2:1", "n2:2"] and state.tasks["n2"]["status"] == "running"
    assert state.attempts["n2:1"]["status"] == "timeout"
    assert state.attempts["n1:1"]["progress"] == 0.5
    assert state.proposals["p1"]["applied"] == "applied"
    assert [d["topic"] for d in state.decisions] == ["apply.result", "gate.computed"]
    assert state.decisions[1]["passed"] is False and state.decisions[1]["signed"]
    assert state.other_topics == {"future.topic": 1}
    assert state.last_sequence == 13
    assert state.head_digest == ledger.events("run-1")[-1].record_digest


def test_replay_is_byte_identical_across_processes_of_reading(ops_root, signer) -> None:
    with Ledger.open(None, ops_root) as led:
        append_sample_run(led, signer=signer)
        first = state_digest(fold(led.events("run-1")))
    with Ledger.open(None, ops_root) as led:  # a fresh reader, as after a restart
        again = fold(led.events("run-1"))
        assert state_digest(again) == first
        assert state_digest(fold([e.to_json() for e in led.events("run-1")])) == first  # export form


def test_late_and_duplicate_terminal_events_change_nothing(ledger) -> None:
    d = EventDraft
    ledger.append_batch("r", [
        d("task.dispatched", {}, node_id="n", node_execution_id="x"),
        d("task.completed", {"outcome": "succeeded"}, node_id="n", node_execution_id="x"),
        d("task.failed", {}, node_id="n", node_execution_id="x"),
        d("task.completed", {"outcome": "succeeded"}, node_id="n", node_execution_id="never-dispatched"),
    ])
    state = fold(ledger.events("r"))
    assert state.attempts["x"]["status"] == "completed" and state.have == ["n"]
    assert "never-dispatched" not in state.attempts


def test_reducers_extend_per_topic_and_refuse_double_registration() -> None:
    seen = []
    rec = build(run_id="r", sequence=1, event_id="e1", ts="2026-01-01T00:00:00Z",
                draft=EventDraft("lab.measured", {"v": 3}), prev_digest=None, signer=None)
    state = fold([rec], reducers={"lab.measured": lambda w, ev: seen.append(ev.payload["v"])})
    assert seen == [3] and state.other_topics == {}
    assert "lab.measured" not in REDUCERS
    with pytest.raises(ValueError):
        reducer("task.dispatched")(lambda w, ev: None)


_topics = st.sampled_from(["run.started", "wave.started", "task.dispatched", "task.progress",
                           "task.completed", "task.failed", "task.timeout", "task.ack",
                           "patch.submitted", "patch.rejected", "gate.computed", "x.unknown"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_topics, st.sampled_from(["n1", "n2", None]), st.sampled_from(["a", "b", None]),
                          st.dictionaries(st.sampled_from(["outcome", "fraction", "proposal_id", "node_ids"]),
                                          st.sampled_from(["succeeded", "failed", 0.25, "p1", ["n1"]]))),
                max_size=40))
def test_fold_is_total_and_deterministic_on_any_event_sequence(items) -> None:
    recs, prev = [], None
    for i, (topic, node, neid, payload) in enumerate(items, start=1):
        rec = build(run_id="r", sequence=i, event_id=f"e{i}", ts="2026-01-01T00:00:00Z",
                    draft=EventDraft(topic, payload, node_id=node, node_execution_id=neid),
                    prev_digest=prev, signer=None)
        recs.append(rec)
        prev = rec.record_digest
    snapshot = [r.payload for r in recs]
    a, b = fold(recs), fold(list(recs))
    assert state_digest(a) == state_digest(b)
    assert [r.payload for r in recs] == snapshot  # the fold never mutates its input
    assert set(a.have) | set(a.need) == set(a.tasks)
