"""What live telemetry costs per ledger event, in one process, without a run around it.

    python benchmarks/telemetry_cost.py [--rounds 100]

Feeds the recorded agent-swarm run (tests/runloop/recorded/agent-swarm, 132 events) through
`ledger.otel.Projector` alone (the baseline: what the file export does too), then through the
projector, the OpenTelemetry SDK's batch processor with the OTLP protobuf encoding (the
exporter's own encoder; nothing is sent) and the Prometheus metrics, as `dome run` does with
OTEL_* set. Prints CPU microseconds per event for each.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FIELDS = ("sequence", "event_id", "ts", "topic", "run_id", "wave_id", "node_id", "node_execution_id", "task_id",
          "payload", "payload_digest", "record_digest", "signature")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=100)
    a = ap.parse_args()
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export import SpanExportResult

    from coordinator.observe.metrics import Metrics
    from coordinator.observe.tracing import SpanSink
    from ledger.otel import Projector

    lines = (ROOT / "tests/runloop/recorded/agent-swarm/events.jsonl").read_text().splitlines()
    events = [SimpleNamespace(**{k: json.loads(x).get(k) for k in FIELDS}) for x in lines]

    class Encode:
        def export(self, spans):
            encode_spans(spans).SerializeToString()
            return SpanExportResult.SUCCESS

        def shutdown(self):
            pass

    n = a.rounds * len(events)
    t0 = time.process_time()
    for i in range(a.rounds):
        proj = Projector(f"run-{i}")
        for ev in events:
            proj.feed(ev)
    base = (time.process_time() - t0) / n * 1e6
    sink, metrics, spans = SpanSink(Encode()), Metrics(), 0
    t0 = time.process_time()
    for i in range(a.rounds):
        proj = Projector(f"run-{i}")
        for ev in events:
            closed, obs = proj.feed(ev)
            spans += len(closed)
            if closed:
                sink.emit(closed)
            if obs:
                metrics.observe(obs)
    sink.close()
    full = (time.process_time() - t0) / n * 1e6
    print(json.dumps({"events": n, "spans": spans, "projection_us_per_event": round(base, 1),
                      "projection_sdk_metrics_us_per_event": round(full, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
