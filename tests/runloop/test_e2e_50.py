"""End to end: a 50-node graph of real command workers in real bubblewrap sandboxes."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from coordinator import runstate as rs
from coordinator.executors.sandbox import probe_bwrap
from tests.conftest import dome_cli
from tests.runloop.conftest import cmd_task, write_queue

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200),
              pytest.mark.skipif(not probe_bwrap()[0], reason="bubblewrap cannot create namespaces here")]


def graph_50() -> list[dict]:
    tasks = []
    for i in range(46):
        deps = sorted({f"n{j:02d}" for j in (i - 1 - i % 3, i // 2 - 1) if 0 <= j < i})
        tasks.append(cmd_task(f"n{i:02d}", f"echo {i} > out_{i:02d}.txt", deps))
    tasks.append(cmd_task("flaky", '[ "$DOME_ATTEMPT" -ge 2 ] || { echo "transient" >&2; exit 7; }; '
                                   'echo ok > flaky.txt', ["n05"], max_attempts=3))
    tasks.append(cmd_task("hang", '[ "$DOME_ATTEMPT" -ge 2 ] || sleep 1000; echo ok > hang.txt', ["n10"],
                          timeout_s=6, max_attempts=3, endgame_duplicates=0))
    tasks.append(cmd_task("wide", "mkdir -p sub && for k in 1 2 3; do echo $k > sub/f$k.txt; done", ["flaky"]))
    tasks.append(cmd_task("tail", "sleep 3; echo done > tail.txt",
                          [f"n{i:02d}" for i in range(40, 46)] + ["hang", "wide"]))
    return tasks


def test_fifty_node_graph_in_bubblewrap(git_repo, ops_root, tmp_path):
    q = write_queue(tmp_path, git_repo, graph_50(),
                    scheduling={"max_parallel": 4, "endgame_threshold": 1, "endgame_max_duplicates": 1},
                    budgets={"max_retries": 10})
    r = dome_cli("run", str(q), "--ops-root", str(ops_root), "--json", timeout=900)
    assert r.returncode in (0, 4), r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["status"] in ("completed", "promoted", "blocked")
    from ledger import Ledger
    from coordinator.keys import load_keyring
    ledger = Ledger.open(None, ops_root)
    ev = ledger.events(out["run_id"])
    acks = {e.node_id: e for e in ev if e.topic == rs.TASK_ACK}
    assert len(acks) == 50 and len({e.payload["node_execution_id"] for e in acks.values()}) == 50
    completed = {e.node_execution_id: e for e in ev if e.topic == rs.TASK_COMPLETED}
    for nid, ack in acks.items():
        assert completed[ack.payload["node_execution_id"]].payload["outcome"] == "succeeded", nid
    # dependencies: a node is first dispatched after all its dependencies succeeded
    first_dispatch = {}
    done_at = {}
    for e in ev:
        if e.topic == rs.TASK_DISPATCHED:
            first_dispatch.setdefault(e.node_id, e.sequence)
        if e.topic == rs.TASK_COMPLETED and e.payload["outcome"] == "succeeded":
            done_at.setdefault(e.node_id, e.sequence)
    for t in graph_50():
        for d in t["dependencies"]:
            assert done_at[d] < first_dispatch[t["node_id"]], (d, t["node_id"])
    # a failing node retried with a fresh node_execution_id (and grant)
    flaky = [e for e in ev if e.node_id == "flaky" and e.topic == rs.TASK_DISPATCHED]
    assert len(flaky) >= 2 and len({e.node_execution_id for e in flaky}) == len(flaky)
    assert len({e.payload["jti"] for e in flaky}) == len(flaky)
    assert any(e.topic == rs.TASK_COMPLETED and e.node_id == "flaky" and e.payload["outcome"] == "failed" for e in ev)
    # a hanging node killed by its wall-clock timeout, then retried (its endgame duplicates are off:
    # a duplicate started as attempt 2 would finish first and the hung attempt would be cancelled instead)
    hang_events = [(e.sequence, e.topic, {k: e.payload.get(k) for k in ("attempt", "kind", "outcome", "reason", "error")})
                   for e in ev if e.node_id == "hang"]
    assert any(e.topic == rs.TASK_TIMEOUT and e.node_id == "hang" for e in ev), hang_events
    assert any(e.topic == "grant.revoked" for e in ev)
    # an endgame duplicate: dispatched, and at most one attempt of the node accepted
    dups = [e for e in ev if e.topic == rs.TASK_DISPATCHED and e.payload["kind"] == "endgame_duplicate"]
    assert dups
    # files
    run_dir = Path(out["ops_path"])
    assert (run_dir / "work.queue.json").is_file()
    assert len(list((run_dir / "events").glob("event.*.json"))) >= len([e for e in ev if e.topic == rs.RUN_FINISHED and 1])
    res = json.loads((run_dir / "tasks" / "n07" / "task.result.json").read_text())
    assert res["status"] == "succeeded" and res["proposal_id"]
    assert (run_dir / "tasks" / "n07" / "outputs" / f"{res['proposal_id']}.diff").read_bytes().startswith(b"diff --git")
    # the whole ledger verifies (CLI when the ledger area ships it, else the library)
    if importlib.util.find_spec("coordinator.cli.ledger_cmd"):
        v = dome_cli("ledger", "verify", "--ops-root", str(ops_root))
        assert v.returncode == 0, v.stdout + v.stderr
    assert ledger.verify(load_keyring(ops_root)).ok
    st = dome_cli("status", out["run_id"], "--ops-root", str(ops_root), "--json")
    assert json.loads(st.stdout)["status"] == out["status"]
