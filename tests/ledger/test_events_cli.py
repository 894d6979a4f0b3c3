"""`dome events RUN_ID` prints and follows a run's events."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ledger import Ledger
from tests.conftest import REPO_ROOT, dome_cli
from tests.ledger.conftest import append_sample_run


def test_events_json_lines_and_since(ledger, ops_root: Path) -> None:
    append_sample_run(ledger)
    out = dome_cli("events", "run-1", "--ops-root", str(ops_root), "--json", "--since", "10")
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [e["sequence"] for e in lines] == [11, 12, 13]
    human = dome_cli("events", "run-1", "--ops-root", str(ops_root))
    assert human.returncode == 0 and "task.dispatched" in human.stdout and "node=n1" in human.stdout
    missing = dome_cli("events", "no-such-run", "--ops-root", str(ops_root))
    assert missing.returncode == 2 and "no run" in missing.stderr


def test_events_follow_stops_at_run_finished(ops_root: Path) -> None:
    with Ledger.open(None, ops_root) as led:
        led.append("live", "run.started", {})
    proc = subprocess.Popen([sys.executable, "-m", "coordinator.cli.main", "events", "live",
                             "--ops-root", str(ops_root), "--json", "--follow"],
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        time.sleep(1.0)
        with Ledger.open(None, ops_root) as led:
            led.append("live", "task.progress", {"fraction": 0.5})
            led.append("live", "run.finished", {"outcome": "succeeded"})
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert [json.loads(line)["topic"] for line in out.splitlines()] == [
        "run.started", "task.progress", "run.finished"]
