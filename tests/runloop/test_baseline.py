"""The pure rules of in-run integration: when a batch is due and when a new wave
starts from the integration head (folded from ledger records, so a replay agrees)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.runloop.baseline import (CanvasFacts, CanvasPolicy, advance_to, batch_due, fold_canvas,
                                          fold_events)

BASE, C1, C2 = "a" * 40, "b" * 40, "c" * 40


def _ev(topic: str, **payload) -> dict:
    return {"topic": topic, "payload": payload}


def _history(*extra: dict) -> list[dict]:
    return [_ev("run.started", base_ref=BASE, base_tree_hash="t0"),
            _ev("wave.started", base_ref=BASE, base_source="run_base"),
            _ev("task.ack", accepted=True, proposal_id="p1"),
            _ev("integration.batch", proposal_ids=["p1"]),
            _ev("integration.checkpoint", commit=C1, tree="t1"),
            _ev("integration.apply_result", applied=True, proposal_id="p1"), *extra]


def test_policy_reads_the_queue_and_defaults_to_integrating_at_the_end() -> None:
    assert CanvasPolicy.from_scheduling({}) == CanvasPolicy()
    p = CanvasPolicy.from_scheduling({"integrate_during_run": True, "integration_batch_size": 2,
                                      "advance_baseline": {"after_layers": 3, "on_passing_validation": True},
                                      "resolver_max_tries": 2})
    assert (p.during_run, p.batch_size, p.advance_after_layers, p.advance_on_validation,
            p.resolver_max_tries) == (True, 2, 3, True, 2)


def test_batch_is_due_when_full_or_when_nothing_runs() -> None:
    assert not batch_due(0, 0, 1)
    assert batch_due(1, 0, 4) and not batch_due(1, 2, 4) and batch_due(4, 2, 4)


def test_after_k_layers_the_next_wave_starts_from_the_head() -> None:
    facts = fold_events(_history())
    assert advance_to(facts, CanvasPolicy(advance_after_layers=1)) == (C1, "t1")
    assert advance_to(facts, CanvasPolicy(advance_after_layers=2)) is None
    assert advance_to(facts, CanvasPolicy()) is None  # no policy: waves keep their base
    moved = fold_canvas(facts, "wave.started", {"base_ref": C1, "base_source": "integration_head"})
    assert moved.layers_since_advance == 0 and advance_to(moved, CanvasPolicy(advance_after_layers=1)) is None


def test_a_passing_validation_of_the_head_advances_a_failing_one_does_not() -> None:
    pol = CanvasPolicy(advance_on_validation=True)
    ok = fold_events(_history(_ev("integration.validation_report", phase="final", passed=True, head_ref=C1)))
    bad = fold_events(_history(_ev("integration.validation_report", phase="final", passed=False, head_ref=C1)))
    assert advance_to(ok, pol) == (C1, "t1") and advance_to(bad, pol) is None


def test_no_advance_while_an_accepted_proposal_waits_for_integration() -> None:
    facts = fold_events(_history(_ev("task.ack", accepted=True, proposal_id="p2")))
    assert advance_to(facts, CanvasPolicy(advance_after_layers=1)) is None


def test_an_ejection_moves_the_head_back() -> None:
    facts = fold_events(_history(_ev("integration.checkpoint", commit=C2, tree="t2"),
                                 _ev("integration.ejected", rolled_back_to=C1)))
    assert facts.head == (C1, "t1")


_topics = st.sampled_from(["run.started", "wave.started", "task.ack", "integration.batch",
                           "integration.checkpoint", "integration.apply_result", "integration.ejected",
                           "integration.validation_report", "x.other"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_topics, st.sampled_from([BASE, C1, C2]), st.booleans()), max_size=30))
def test_fold_is_pure_and_event_by_event_equals_the_whole(items) -> None:
    events = [_ev(t, base_ref=c, commit=c, tree="t" + c[0], rolled_back_to=c, head_ref=c, phase="final",
                  passed=b, applied=b, accepted=b, proposal_id=c[:4], proposal_ids=[c[:4]])
              for t, c, b in items]
    step = CanvasFacts()
    for e in events:
        step = fold_canvas(step, e["topic"], e["payload"])
    assert fold_events(events) == step == fold_events(list(events))
    got = advance_to(step, CanvasPolicy(advance_after_layers=1, advance_on_validation=True))
    assert got is None or got == step.head
