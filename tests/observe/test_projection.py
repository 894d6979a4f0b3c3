"""The one projection of ledger events to telemetry (`ledger.otel.Projector`): what the
live exporters send, event by event, is what the file export writes; the tree has the
gateway calls under their attempts and the integration steps under the run; metric
observations come from the same events; a failing sink never reaches the run."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from ledger.otel import STEPS, Projector, project, span_id

RECORDED = Path(__file__).resolve().parents[1] / "runloop" / "recorded"
FIELDS = ("sequence", "event_id", "ts", "topic", "run_id", "wave_id", "node_id", "node_execution_id", "task_id",
          "payload", "payload_digest", "record_digest", "signature")


def recorded(name: str) -> list[SimpleNamespace]:
    lines = (RECORDED / name / "events.jsonl").read_text().splitlines()
    return [SimpleNamespace(**{k: json.loads(x).get(k) for k in FIELDS}) for x in lines]


@pytest.mark.parametrize("name", sorted(p.name for p in RECORDED.iterdir() if p.is_dir()))
def test_live_feed_equals_the_file_projection(name: str) -> None:
    events = recorded(name)
    proj = Projector(events[0].run_id)
    live = []
    for ev in events:  # as the follower hands them over, one at a time
        closed, _ = proj.feed(ev)
        live += [s.otlp() for s in closed]
    live += [s.otlp() for s in proj.open_spans()]
    file = project(events)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    key = lambda s: s["spanId"]  # noqa: E731
    assert sorted(live, key=key) == sorted(file, key=key)
    assert len({s["spanId"] for s in file}) == len(file)


def test_the_tree_gateway_calls_under_attempts_steps_under_the_run() -> None:
    events = recorded("agent-swarm")
    run_id = events[0].run_id
    spans = {s["spanId"]: s for s in project(events)["resourceSpans"][0]["scopeSpans"][0]["spans"]}
    root = span_id("run", run_id)
    calls = [e for e in events if e.topic == "grant.call"]
    assert calls
    for e in calls:
        s = spans[span_id("call", run_id, e.event_id)]
        assert s["parentSpanId"] == span_id("attempt", run_id, e.node_execution_id)
        assert int(s["startTimeUnixNano"]) <= int(s["endTimeUnixNano"])
    steps = [e for e in events if e.topic in STEPS]
    assert {STEPS[e.topic] for e in steps} == {"verify", "plan", "apply", "validate", "bisect", "gate", "promote"}
    for e in steps:
        s = spans[span_id("step", run_id, e.event_id)]
        assert s["parentSpanId"] == root and s["name"] == f"integration {STEPS[e.topic]}"
    v = next(e for e in steps if e.topic == "integration.validation_report")
    s = spans[span_id("step", run_id, v.event_id)]
    got = (int(s["endTimeUnixNano"]) - int(s["startTimeUnixNano"])) / 1e9
    assert abs(got - v.payload["duration_s"]) < 1e-3  # a validation step lasts what its report says


def test_observations_count_what_the_ledger_says() -> None:
    events = recorded("agent-swarm")
    proj = Projector(events[0].run_id)
    obs = [o for ev in events for o in proj.feed(ev)[1]]
    attempts = [o for o in obs if o.metric == "attempts_total"]
    ended = [e for e in events if e.topic in ("task.completed", "task.failed", "task.timeout", "task.cancelled",
                                               "task.lost")]
    assert len(attempts) == len(ended)
    assert len([o for o in obs if o.metric == "attempt_duration_seconds"]) == len(ended)
    assert len([o for o in obs if o.metric == "gateway_call_seconds"]) == sum(e.topic == "grant.call" for e in events)
    fates = [dict(o.labels)["fate"] for o in obs if o.metric == "proposals_total"]
    applies = [e for e in events if e.topic == "integration.apply_result"]
    assert fates.count("applied") == sum(bool(e.payload.get("applied")) for e in applies)
    assert fates.count("drop") == sum(e.payload.get("decision") == "drop" for e in applies)
    assert [dict(o.labels) for o in obs if o.metric == "gate_decisions_total"] == [{"decision": "pass"}]


def test_a_failing_sink_is_counted_and_never_raised(ops_root) -> None:
    from coordinator.observe.follow import Follower
    from ledger import Ledger
    from tests.ledger.conftest import append_sample_run

    ledger = Ledger.open(None, ops_root)
    append_sample_run(ledger)

    class Broken:
        def emit(self, spans):
            raise RuntimeError("collector down")

        def close(self):
            raise RuntimeError("still down")

        def observe(self, obs):
            raise RuntimeError("registry gone")

    f = Follower(ledger, "run-1", spans=Broken(), metrics=Broken(), log=lambda ev: 1 / 0, poll_s=60).start()
    f.close()
    assert f.errors >= 3 and f.seen["run-1"] == ledger.head("run-1")
    ledger.close()


def test_metrics_text_from_observations() -> None:
    from coordinator.observe.metrics import Metrics

    events = recorded("agent-swarm")
    proj = Projector(events[0].run_id)
    m = Metrics()
    for ev in events:
        m.observe(proj.feed(ev)[1])
    text = m.exposition()[0].decode()
    assert 'dome_attempts_total{outcome="succeeded"} 7.0' in text
    assert 'dome_integration_step_seconds_count{step="validate"} 4.0' in text
    assert "dome_gateway_call_seconds_bucket" in text and 'dome_gate_decisions_total{decision="pass"} 1.0' in text


def test_a_tapped_follower_fills_what_it_was_not_handed_from_the_ledger(ops_root) -> None:
    from coordinator.observe.follow import Follower
    from ledger import Ledger
    from tests.ledger.conftest import append_sample_run

    class Spans:
        def __init__(self):
            self.got = []

        def emit(self, spans):
            self.got += [s.otlp() for s in spans]

        def close(self):
            pass

    ledger = Ledger.open(None, ops_root)
    append_sample_run(ledger)
    records = ledger.events("run-1")
    sink, logged = Spans(), []
    f = Follower(ledger, None, spans=sink, log=logged.append, tapped=True, poll_s=60).start()
    for rec in records[:3] + records[6:9] + records[5:6]:  # a gap, then one already covered
        f.tap(rec)
    f.close()  # the rest (after the last tap) is read once at the end
    assert [e.sequence for e in logged] == [r.sequence for r in records]
    assert f.gap_reads == 1 and f.run_id == "run-1"
    file = project(records)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert sorted(sink.got, key=lambda s: s["spanId"]) == sorted(file, key=lambda s: s["spanId"])
    ledger.close()
