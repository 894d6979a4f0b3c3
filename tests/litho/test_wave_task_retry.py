"""A lost clean-up task and a lost seam task are each retried alone (real `dome run`, real workers).

The two-clip layout (2 x 3 tiles, one tile per task, two ILT iterations) runs its tile, clean-up
and seam tasks. The first attempt of one clean-up task and of one seam task does its work and
then loses its worker (the tile journal's first-attempt hook: a hard exit with no result, after
a marker put through the gateway so that the retry finishes). From the run's own events: only
those two tasks are dispatched twice; every other task once; no tile is optimised again (each
tile's ILT ran in exactly one completed attempt, and the retries optimised none); the retried
tasks redo only their own clean-up, seam windows and evaluations; and the run promotes.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import dome_cli
from worker_sdk.litho.tilejournal import EXIT_FIRST_HOOK, LOST_PREFIX
from worker_sdk.litho.tilequeue import tile_queue

from .test_tile_retry import REQ, two_clip_repo

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _queue(tmp_path: Path, iccad13: Path) -> tuple[Path, dict, str, str]:
    repo = tmp_path / "repo"
    plan = two_clip_repo(repo, iccad13)
    q = tile_queue(plan, layout=REQ["layout"], out=REQ["out"], tile_dir=REQ["tiling"]["dir"], kernels=REQ["kernels"],
                   name="wave-task-retry", batch_size=1, iterations=REQ["iterations"], repo=str(repo),
                   promote_to="refs/heads/masks", endgame_max_duplicates=0)
    # the tasks of the waves only (the stitch and the evaluation have their own end-to-end test);
    # the branch must hold every clean core, seam record and tile evaluation
    q["tasks"] = [t for t in q["tasks"] if t["node_id"].startswith(("tiles-", "clean-", "seams-"))]
    d = REQ["tiling"]["dir"]
    q["validations"] = [{"suite": "command", "name": "tests", "required": True, "argv": [
        "sh", "-c", f"test $(ls {d}/clean/*.npy | wc -l) -eq 6 && test $(ls {d}/seams/*.json | wc -l) -eq 2 "
                    f"&& test $(ls {d}/evals/*.json | wc -l) -eq 6"]}]
    clean = next(t for t in q["tasks"] if t["node_id"].startswith("clean-"))
    seam = next(t for t in q["tasks"] if t["node_id"].startswith("seams-"))
    for t in q["tasks"]:
        t["action_spec"]["params"]["threads"] = 1
    for t in (clean, seam):
        t["action_spec"]["env"] = {EXIT_FIRST_HOOK: "1"}
    qfile = tmp_path / "queue.json"
    qfile.write_text(json.dumps(q))
    return qfile, q, clean["node_id"], seam["node_id"]


def test_a_lost_clean_up_task_and_a_lost_seam_task_are_each_retried_alone(tmp_path: Path, iccad13: Path) -> None:
    qfile, q, lost_clean, lost_seam = _queue(tmp_path, iccad13)
    ops = tmp_path / "ops"
    r = dome_cli("run", str(qfile), "--ops-root", str(ops), "--json", timeout=800)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out.get("status") == "promoted", (out, r.stderr[-3000:])
    events = [json.loads(x) for x in dome_cli("events", out["run_id"], "--ops-root", str(ops), "--json").stdout.splitlines()]
    nodes = [t["node_id"] for t in q["tasks"]]
    lost = {lost_clean, lost_seam}

    # exactly the two lost tasks ran twice, each after one lost attempt; every other task once
    dispatched = Counter(e["node_id"] for e in events if e["topic"] == "task.dispatched")
    assert dispatched == Counter({n: (2 if n in lost else 1) for n in nodes}), dispatched
    failed = Counter(e["node_id"] for e in events if e["topic"] in ("task.failed", "task.lost"))
    assert failed == Counter({n: 1 for n in lost}), failed
    completed = [e for e in events if e["topic"] == "task.completed"]
    assert Counter(e["node_id"] for e in completed) == Counter(nodes)
    marks = [e for e in events if e["topic"] == "artifact.put" and (e["payload"].get("name") or "").startswith(LOST_PREFIX)]
    assert sorted(e["node_id"] for e in marks) == sorted(lost)  # the lost attempts did their work, then died

    # no tile optimised again: each tile's ILT in one completed attempt of its own tile task
    summary = {e["node_id"]: e["payload"]["summary"] for e in completed}
    ran = Counter(tid for s in summary.values() for tid in s["tiles_run"])
    assert sorted(ran) == [f"T_{r}_{c}" for r in range(2) for c in range(3)] and set(ran.values()) == {1}, ran
    assert all(summary[n]["tiles_run"] == [] for n in nodes if not n.startswith("tiles-"))
    # the retries redid only their own work
    spec = {t["node_id"]: t["action_spec"]["params"]["tiling"] for t in q["tasks"]}
    assert summary[lost_clean]["tiles_cleaned"] == sorted(spec[lost_clean]["clean"])
    assert summary[lost_seam]["seams_checked"] == sorted(spec[lost_seam]["seams"])
    assert summary[lost_seam]["tiles_evaluated"] == sorted(spec[lost_seam]["evaluate"])
    assert Counter(tid for s in summary.values() for tid in s["tiles_evaluated"]) == Counter(ran)  # each evaluated once
    assert Counter(tid for s in summary.values() for tid in s["tiles_cleaned"]) == Counter(ran)  # each cleaned once
