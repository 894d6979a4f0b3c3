"""Crash test at tile granularity: a lost tile task is retried alone, and a coordinator killed
with kill -9 after some tiles finished resumes without redoing them (real `dome run`, real
sandboxed workers, the run's own ledger as the witness).

The layout is two ICCAD 2013 clips side by side (2 x 3 tiles, four parity waves), one tile per
task and two ILT iterations, so the whole test stays near a minute on the 2-core machine.
- The tile task of T_1_0 loses its worker right after its tile is durable (the tile journal's
  test hook): it alone is dispatched again, and the retry receives the tile instead of
  optimising it.
- `dome run` is ended like kill -9 (DOME_CRASH_AFTER_TOPIC, status 137) right after the
  second `task.ack`, that is after two tile tasks finished and were accepted; the resume is
  ended the same way right after its first durable tile, while that tile's task is still in
  flight; a second `dome run --resume` finishes the run.
From the ledger: no task that finished before the kill is dispatched after it, every tile is
optimised (its core put through the gateway) exactly once in the whole run, and the finished
cores on the promoted branch are the ones the first attempts made.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from ledger.crashpoint import ENV as CRASH_ENV
from ledger.crashpoint import EXIT_STATUS as CRASH_STATUS
from tests.conftest import dome_cli
from worker_sdk.litho.tilejournal import EXIT_HOOK, NAME_PREFIX
from worker_sdk.litho.tilequeue import tile_queue

from .test_tile_retry import REQ, two_clip_repo

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

LOST_TILE = "T_1_0"


def _queue(tmp_path: Path, iccad13: Path) -> tuple[Path, Path, dict]:
    repo = tmp_path / "repo"
    plan = two_clip_repo(repo, iccad13)
    q = tile_queue(plan, layout=REQ["layout"], out=REQ["out"], tile_dir=REQ["tiling"]["dir"], kernels=REQ["kernels"],
                   name="tile-crash", batch_size=1, iterations=REQ["iterations"], repo=str(repo),
                   promote_to="refs/heads/masks", endgame_max_duplicates=0, clean_in_waves=False)
    # the tile tasks only: the crash and the retries are about them (stitch and evaluation
    # have their own end-to-end test); the branch must hold every finished core
    q["tasks"] = [t for t in q["tasks"] if t["node_id"].startswith("tiles-")]
    q["validations"] = [{"suite": "command", "name": "tests", "required": True,
                         "argv": ["sh", "-c", f"test $(ls {REQ['tiling']['dir']}/raw/*.npy | wc -l) -eq 6"]}]
    for t in q["tasks"]:
        t["action_spec"]["params"]["threads"] = 1
        if t["action_spec"]["params"]["tiling"]["tiles"] == [LOST_TILE]:
            t["action_spec"]["env"] = {EXIT_HOOK: "1"}
    qfile = tmp_path / "queue.json"
    qfile.write_text(json.dumps(q))
    return repo, qfile, q


def _events(ops: Path, run_id: str) -> list[dict]:
    r = dome_cli("events", run_id, "--ops-root", str(ops), "--json")
    return [json.loads(x) for x in r.stdout.splitlines()]


def test_killed_coordinator_resumes_without_redoing_finished_tiles_and_a_lost_tile_task_is_retried_alone(
        tmp_path: Path, iccad13: Path) -> None:
    repo, qfile, q = _queue(tmp_path, iccad13)
    tile_of = {t["node_id"]: t["action_spec"]["params"]["tiling"]["tiles"][0] for t in q["tasks"]}
    lost_node = next(n for n, tid in tile_of.items() if tid == LOST_TILE)
    ops = tmp_path / "ops"
    r = dome_cli("run", str(qfile), "--ops-root", str(ops), "--json", env={CRASH_ENV: "task.ack:2"}, timeout=400)
    assert r.returncode == CRASH_STATUS, (r.returncode, r.stderr[-3000:])
    run_id = _only_run(ops)
    before = _events(ops, run_id)
    finished = {e["node_id"] for e in before if e["topic"] == "task.completed"}
    assert len(finished) >= 2  # the kill came after two tile tasks finished
    durable = {e["payload"]["name"][len(NAME_PREFIX):] for e in before if e["topic"] == "artifact.put"
               and (e["payload"].get("name") or "").startswith(NAME_PREFIX)}
    assert {tile_of[n] for n in finished} <= durable

    # the resume is killed too, right after its first durable tile (the task in flight holds it
    # but has not finished): the next resume's retry must receive it, not optimise it again
    r = dome_cli("run", "--resume", run_id, "--ops-root", str(ops), "--json", env={CRASH_ENV: "artifact.put:1"},
                 timeout=400)
    assert r.returncode == CRASH_STATUS, (r.returncode, r.stderr[-3000:])
    middle = _events(ops, run_id)
    finished_2 = {e["node_id"] for e in middle if e["topic"] == "task.completed"}
    held = middle[-1]
    assert held["topic"] == "artifact.put" and held["payload"]["name"].startswith(NAME_PREFIX)
    assert held["node_id"] not in finished_2

    r = dome_cli("run", "--resume", run_id, "--ops-root", str(ops), "--json", timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == "promoted", out
    events = _events(ops, run_id)
    resumes = [i for i, e in enumerate(events) if e["topic"] == "run.resumed"]
    assert len(resumes) == 2
    after = events[resumes[0]:]

    # finished tile tasks are not dispatched again after either kill
    for done, since in ((finished, resumes[0]), (finished_2, resumes[1])):
        again = sorted({e["node_id"] for e in events[since:] if e["topic"] == "task.dispatched"} & done)
        assert again == [], again
    # every tile is optimised exactly once in the whole run: one durable core per tile
    puts = Counter(e["payload"]["name"][len(NAME_PREFIX):] for e in events if e["topic"] == "artifact.put"
                   and (e["payload"].get("name") or "").startswith(NAME_PREFIX))
    assert sorted(puts) == sorted(tile_of.values()) and set(puts.values()) == {1}, puts
    ran = Counter(tid for e in events if e["topic"] == "task.completed" for tid in e["payload"]["summary"]["tiles_run"])
    held_tile = held["payload"]["name"][len(NAME_PREFIX):]
    assert set(ran.values()) <= {1} and LOST_TILE not in ran and held_tile not in ran  # retries optimised nothing
    held_done = [e["payload"]["summary"] for e in events if e["topic"] == "task.completed"
                 and e["node_id"] == held["node_id"]]
    assert held_done[0]["tiles_restored"] == [held_tile]

    # the lost tile task was retried alone: only it (and a task the kill left in flight) ran twice
    dispatched = Counter(e["node_id"] for e in events if e["topic"] == "task.dispatched")
    in_flight = {e["node_id"] for e in after if e["topic"] == "task.lost"}
    assert dispatched[lost_node] == 2
    assert {n for n, k in dispatched.items() if k > 1} <= {lost_node} | in_flight
    lost = [e["payload"]["summary"] for e in events if e["topic"] == "task.completed" and e["node_id"] == lost_node]
    assert lost and lost[0]["tiles_restored"] == [LOST_TILE] and lost[0]["tiles_run"] == []

    # the promoted branch holds the cores the first attempts put, byte for byte
    import base64
    import subprocess
    for e in events:
        name = (e["payload"].get("name") or "") if e["topic"] == "artifact.put" else ""
        if not name.startswith(NAME_PREFIX):
            continue
        tid = name[len(NAME_PREFIX):]
        core = subprocess.run(["git", "show", f"refs/heads/masks:{REQ['tiling']['dir']}/raw/{tid}.npy"], cwd=repo,
                              check=True, capture_output=True, timeout=30).stdout
        record = _artifact(ops, e["payload"])
        assert base64.b64decode(record["core_b64"]) == core, tid
    v = dome_cli("verify", run_id, "--ops-root", str(ops), "--json")
    assert v.returncode == 0, v.stdout[-2000:]


def _only_run(ops: Path) -> str:
    from ledger import Ledger

    with Ledger.open(None, ops) as ledger:
        (run_id,) = ledger.run_ids()
    return run_id


def _artifact(ops: Path, put: dict) -> dict:
    """The tile record an artifact.put event names, read back from the run's content store."""
    from ledger import Ledger

    with Ledger.open(None, ops) as ledger:
        return json.loads(ledger.blobs.get(put["digest"]))
