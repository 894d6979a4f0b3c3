"""`dome status` and `dome events --follow` from another terminal while `dome run` runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO_ROOT, dome_cli
from tests.runloop.conftest import cmd_task, write_queue


@pytest.mark.slow
def test_status_and_follow_during_a_run(git_repo, ops_root, tmp_path):
    from ledger import Ledger

    q = write_queue(tmp_path, git_repo, [cmd_task("slow", "sleep 4; echo s > s.txt"),
                                         cmd_task("after", "echo a > a.txt", ["slow"])],
                    scheduling={"endgame_max_duplicates": 0})
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    run = subprocess.Popen([sys.executable, "-m", "coordinator.cli.main", "run", str(q), "--ops-root", str(ops_root),
                            "--sandbox", "none"], env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    ledger = Ledger.open(None, ops_root)
    deadline = time.monotonic() + 120
    while not ledger.run_ids() and time.monotonic() < deadline:
        time.sleep(0.1)
    run_id = ledger.run_ids()[0]
    follow = subprocess.Popen([sys.executable, "-m", "coordinator.cli.main", "events", run_id, "--follow",
                               "--ops-root", str(ops_root)], env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    st = dome_cli("status", run_id, "--ops-root", str(ops_root), "--json")
    assert st.returncode == 0, st.stderr
    assert json.loads(st.stdout)["status"] == "running"
    out, err = run.communicate(timeout=180)
    assert run.returncode in (0, 4), err[-2000:]
    assert "task.dispatched slow" in err  # plain lines when stderr is not a terminal
    fout, ferr = follow.communicate(timeout=60)
    assert follow.returncode == 0, ferr
    assert "run.finished" in fout and "task.completed" in fout
    final = json.loads(dome_cli("status", run_id, "--ops-root", str(ops_root), "--json").stdout)
    assert final["status"] in ("completed", "promoted", "blocked") and final["nodes"] == {"succeeded": 2}
