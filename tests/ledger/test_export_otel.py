"""Projections: ops/runs/<run_id>/events files and the OTel view."""
from __future__ import annotations

import base64
import json
from pathlib import Path

from ledger.export import event_path, export_records, export_run
from ledger.otel import project, span_id, trace_id, write_projection
from registry.canonical import sha256_hex
from tests.ledger.conftest import append_sample_run


def test_export_mirrors_the_ledger_and_ledger_wins(ledger, ops_root: Path, signer) -> None:
    append_sample_run(ledger, signer=signer)
    records = ledger.events("run-1")
    assert len(export_records(records, ops_root)) == len(records)
    assert export_records(records, ops_root) == []  # unchanged files are not rewritten
    for rec in records:
        data = json.loads(event_path(ops_root, "run-1", rec.sequence).read_text())
        raw = base64.b64decode(data["dsse"]["payload"])
        assert raw == rec.record_bytes and "sha256:" + sha256_hex(raw) == data["record_digest"]
        assert data["sequence"] == rec.sequence and data["signature"] == rec.signature
    p = event_path(ops_root, "run-1", 2)
    p.write_text("{}")
    (p.parent / "event.99.json").write_text("{}")
    export_run(ledger, "run-1")
    assert json.loads(p.read_text())["sequence"] == 2
    assert not (p.parent / "event.99.json").exists()
    assert sorted(int(f.name.split(".")[1]) for f in p.parent.iterdir()) == list(range(1, 14))


def test_run_ids_with_slashes_stay_inside_ops_runs(ledger, ops_root: Path) -> None:
    rec = ledger.append("team/a/../../x", "run.started", {})
    (path,) = export_records([rec], ops_root)
    assert path.resolve().is_relative_to((ops_root / "runs").resolve())
    assert path.parent.parent.name == "team%2Fa%2F..%2F..%2Fx"


def test_otel_projection_has_stable_ids_and_spans_per_attempt(ledger, ops_root: Path) -> None:
    append_sample_run(ledger)
    evs = ledger.events("run-1")
    otlp = project(evs)
    assert project(ledger.events("run-1")) == otlp
    spans = {s["spanId"]: s for s in otlp["resourceSpans"][0]["scopeSpans"][0]["spans"]}
    run_span = spans[span_id("run", "run-1")]
    assert run_span["traceId"] == trace_id("run-1") and "parentSpanId" not in run_span
    timeout = spans[span_id("attempt", "run-1", "n2:1")]
    assert timeout["status"]["code"] == 2 and timeout["parentSpanId"] == span_id("wave", "run-1", "w1")
    assert spans[span_id("attempt", "run-1", "n1:1")]["status"]["code"] == 1
    logs = otlp["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
    assert len(logs) == len(evs)
    attrs = {a["key"]: a["value"] for a in logs[2]["attributes"]}
    assert attrs["dome.sequence"] == {"intValue": "3"}
    assert attrs["dome.record_digest"]["stringValue"] == evs[2].record_digest
    assert attrs["dome.node_execution_id"]["stringValue"] == "n1:1"
    out = write_projection(ledger, "run-1")
    assert out == ops_root / "runs" / "run-1" / "otel" / "otlp.json"
    assert json.loads(out.read_text())["resourceLogs"]


def test_cli_export_rewrites_projections_on_demand(ledger, ops_root: Path) -> None:
    from tests.conftest import dome_cli
    append_sample_run(ledger)
    ledger.append("run-2", "run.started", {})
    out = dome_cli("ledger", "export", "--ops-root", str(ops_root), "--json")
    assert out.returncode == 0, out.stderr
    runs = {r["run_id"]: r for r in json.loads(out.stdout)["runs"]}
    assert runs["run-1"]["events"] == 13 and runs["run-2"]["rewritten"] == 1
    assert event_path(ops_root, "run-1", 13).is_file()
    assert (ops_root / "runs" / "run-1" / "otel" / "otlp.json").is_file()
    event_path(ops_root, "run-1", 5).write_text("tampered")
    again = dome_cli("ledger", "export", "run-1", "--ops-root", str(ops_root), "--json")
    assert json.loads(again.stdout)["runs"][0]["rewritten"] == 1
    assert json.loads(event_path(ops_root, "run-1", 5).read_text())["sequence"] == 5
    assert dome_cli("ledger", "export", "nope", "--ops-root", str(ops_root)).returncode == 2
