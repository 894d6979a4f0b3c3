"""A real run's spans leave over OTLP/HTTP while it runs, and they are the file projection's."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, dome_cli
from tests.observe.receiver import Receiver
from tests.runloop.conftest import cmd_task, write_queue


def _run(q: Path, ops_root: Path, env_extra: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({"PYTHONPATH": str(REPO_ROOT), **env_extra})
    return subprocess.run([sys.executable, "-m", "coordinator.cli.main", "run", str(q), "--ops-root", str(ops_root),
                           "--sandbox", "none", "--json"], env=env, cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=180)


def _file_spans(ops_root: Path, run_id: str) -> dict[str, dict]:
    out = dome_cli("ledger", "export", run_id, "--ops-root", str(ops_root), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads((ops_root / "runs" / run_id / "otel" / "otlp.json").read_text())
    return {s["spanId"]: s for s in data["resourceSpans"][0]["scopeSpans"][0]["spans"]}


@pytest.mark.slow
def test_live_spans_over_otlp_form_the_tree_and_equal_the_file(git_repo, ops_root, tmp_path) -> None:
    q = write_queue(tmp_path, git_repo, [cmd_task("a", "echo a > a.txt"), cmd_task("b", "echo b > b.txt", ["a"])],
                    scheduling={"endgame_max_duplicates": 0})
    with Receiver() as rx:
        res = _run(q, ops_root, {"OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint, "OTEL_SERVICE_NAME": "dome-test"})
        assert res.returncode == 0, res.stderr[-3000:]
        run_id = json.loads(res.stdout)["run_id"]
    live = {s["spanId"]: s for s in rx.spans}
    assert len(live) == len(rx.spans), "a span was sent twice"
    assert {s["path"] for s in rx.spans} == {"/v1/traces"} and {s["service"] for s in rx.spans} == {"dome-test"}
    by_name = lambda prefix: [s for s in live.values() if s["name"].startswith(prefix)]  # noqa: E731
    (run,) = by_name("run ")
    waves, attempts, calls, steps = by_name("wave "), by_name("attempt "), by_name("gateway "), by_name("integration ")
    assert run["parentSpanId"] is None and len(waves) == 2 and len(attempts) == 2 and calls
    assert all(w["parentSpanId"] == run["spanId"] for w in waves)
    assert all(live[a["parentSpanId"]] in waves for a in attempts)
    assert all(live[c["parentSpanId"]] in attempts for c in calls)
    assert {s["attributes"]["dome.step"] for s in steps} >= {"verify", "plan", "apply", "validate", "gate", "promote"}
    assert all(s["parentSpanId"] == run["spanId"] for s in steps)
    assert all(a["attributes"]["dome.node_execution_id"] and a["attributes"]["dome.run_id"] == run_id
               for a in attempts)
    # the file projection, written afterwards from the ledger, holds the same spans: ids, parents, times
    file = _file_spans(ops_root, run_id)
    assert set(file) == set(live)
    for sid, s in file.items():
        got = live[sid]
        assert (got["traceId"], got["parentSpanId"], got["name"]) == (s["traceId"], s.get("parentSpanId"), s["name"])
        assert (str(got["start"]), str(got["end"])) == (s["startTimeUnixNano"], s["endTimeUnixNano"])


@pytest.mark.slow
def test_a_collector_that_fails_never_fails_the_run(git_repo, ops_root, tmp_path) -> None:
    q = write_queue(tmp_path, git_repo, [cmd_task("a", "echo a > a.txt")])
    with Receiver(fail_first=1000) as rx:
        res = _run(q, ops_root, {"OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint})
    assert res.returncode == 0, res.stderr[-3000:]
    assert rx.requests >= 1 and rx.spans == []
    assert json.loads(res.stdout)["status"] == "promoted"
