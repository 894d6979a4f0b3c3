"""`dome serve`'s app over SQLite and over PostgreSQL: the runs list, the run page and
/metrics read the ledger through its API, so both stores serve the same page."""
from __future__ import annotations

import re

import pytest

from tests.ledger.conftest import append_sample_run
from tests.ledger.pg import pg_url  # noqa: F401 - the fixture

TOKEN = "serve-app-token"


def _client(ledger, ops_root):
    from starlette.testclient import TestClient

    from coordinator.serve.app import ServeState, build_app

    return TestClient(build_app(ServeState(ledger, ops_root, TOKEN)), headers={"Authorization": f"Bearer {TOKEN}"})


def _check(ledger, ops_root) -> None:
    import uuid
    rid = f"run-serve-{uuid.uuid4().hex[:8]}"  # the PostgreSQL server is shared by the session's tests
    append_sample_run(ledger, rid)
    client = _client(ledger, ops_root)
    runs = [r for r in client.get("/runs.json").json()["runs"] if r["run_id"] == rid]
    assert runs == [{"run_id": rid, "status": "running", "events": ledger.head(rid),
                     "started": ledger.events(rid)[0].ts}]
    page = client.get(f"/runs/{rid}").text
    assert 'data-seq="%d"' % ledger.head(rid) in page and "Wave timeline" in page
    assert client.get("/runs/nope").status_code == 404
    text = client.get("/metrics").text
    assert 'dome_attempts_total{outcome="succeeded"} 1.0' in text and 'dome_attempts_total{outcome="timeout"} 1.0' in text
    assert 'dome_gate_decisions_total{decision="blocked"} 1.0' in text
    ledger.append(rid, "run.finished", {"status": "blocked"})
    text = client.get("/metrics").text  # a second scrape counts each event once
    assert 'dome_attempts_total{outcome="succeeded"} 1.0' in text
    events = client.get(f"/runs/{rid}/events").text  # the run is over: one update, then the stream ends
    assert events.count("event: update") == 1 and '"final":true' in events
    assert re.search(r'"seq":%d\b' % ledger.head(rid), events)


def test_serve_over_sqlite(ops_root) -> None:
    from ledger import Ledger
    with Ledger.open(None, ops_root) as ledger:
        _check(ledger, ops_root)


def test_serve_over_postgres(pg_url, ops_root) -> None:  # noqa: F811
    import uuid
    from urllib.parse import parse_qs, urlsplit

    import psycopg

    from ledger import Ledger
    # a database of its own: /metrics counts every run of the ledger, and the server is shared
    name = f"dome_serve_{uuid.uuid4().hex[:8]}"
    host = parse_qs(urlsplit(pg_url).query)["host"][0]
    with psycopg.connect(dbname="postgres", user="postgres", host=host, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    with Ledger.open(pg_url.replace("@/postgres?", f"@/{name}?"), ops_root) as ledger:
        _check(ledger, ops_root)


def test_serve_logs_each_request_as_json_with_its_request_id_and_run(ops_root, capsys) -> None:
    import json

    from starlette.testclient import TestClient

    from coordinator.serve.app import ServeState, build_app
    from ledger import Ledger
    with Ledger.open(None, ops_root) as ledger:
        append_sample_run(ledger, "run-logged")
        client = TestClient(build_app(ServeState(ledger, ops_root, TOKEN), json_logs=True),
                            headers={"Authorization": f"Bearer {TOKEN}", "x-request-id": "req-7"})
        assert client.get("/runs/run-logged").status_code == 200
        assert client.get("/runs/nope").status_code == 404
    lines = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
    reqs = [x for x in lines if x.get("msg") == "serve.request"]
    assert [(r["path"], r["status"], r["run_id"], r["request_id"]) for r in reqs] == [
        ("/runs/run-logged", 200, "run-logged", "req-7"), ("/runs/nope", 404, "nope", "req-7")]
    assert reqs[1]["level"] == "warning" and all(r["ms"] >= 0 for r in reqs)
