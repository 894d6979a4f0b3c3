"""A lost tile worker is retried without redoing its finished tiles (real `dome run`, real processes).

The first attempt of the wave-0 tile task (two tiles, one [2, N, N] batch)
puts each finished tile through the gateway and is then killed by the test
hook (DOME_LITHO_TEST_EXIT_AFTER_TILES=1: a hard exit right after its first
tile is durable). The coordinator retries the task; the retry receives the
finished tile from the gateway, optimises only the other one, and the
stitched mask is byte-identical to an uninterrupted run of the same request
(which cleans every tile in one serial pass, where the queue cleans them in
the waves).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import dome_cli, git, make_repo
from worker_sdk.litho import api
from worker_sdk.litho.tiledjob import prepare
from worker_sdk.litho.tilejournal import EXIT_HOOK
from worker_sdk.litho.tilequeue import tile_queue

from .test_tiled import two_clips, write_oas

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

REQ = {"layout": "layouts/two.oas", "out": "masks/two.oas", "kernels": "kernels/iccad13", "fill": "lithobench",
       "seed": 0, "iterations": 2, "threads": 1, "tiling": {"dir": "masks/two.tiles"}}


def _in(root: Path, req: dict) -> dict:
    return {**req, **{k: str(root / req[k]) for k in ("layout", "out", "kernels")},
            "tiling": {**req["tiling"], "dir": str(root / req["tiling"]["dir"])}}


def two_clip_repo(repo: Path, iccad13: Path):
    """A git repository with two ICCAD 2013 clips side by side (2 x 3 tiles), the kernels and the
    tile plan of REQ committed; returns the plan."""
    make_repo(repo)
    (repo / "layouts").mkdir()
    write_oas(two_clips(iccad13), repo / "layouts" / "two.oas")
    for corner in ("focus", "defocus"):
        shutil.copytree(iccad13 / "kernels_bin" / corner, repo / "kernels/iccad13/kernels_bin" / corner)
    plan = prepare(_in(repo, REQ))
    assert len(plan.tiles) == 6
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "layout, kernels, tile plan")
    return plan


def test_a_lost_tile_worker_is_retried_without_redoing_its_finished_tile(tmp_path: Path, iccad13: Path) -> None:
    repo = tmp_path / "repo"
    plan = two_clip_repo(repo, iccad13)
    reference = tmp_path / "reference"  # the uninterrupted run, in this process
    shutil.copytree(repo, reference, ignore=shutil.ignore_patterns(".git"))

    q = tile_queue(plan, layout=REQ["layout"], out=REQ["out"], tile_dir=REQ["tiling"]["dir"], kernels=REQ["kernels"],
                   name="tile-retry", iterations=REQ["iterations"], repo=str(repo), promote_to="refs/heads/masks",
                   endgame_max_duplicates=0,  # the retry after a lost worker is watched here, not a duplicate
                   seams_in_waves=False,  # no seam check here (below); the clean-up runs in the waves
                   validations=[{"suite": "command", "name": "tests", "argv": ["test", "-f", REQ["out"]],
                                 "required": True}])
    q["tasks"] = [t for t in q["tasks"] if t["node_id"] != "evaluate"]
    for t in q["tasks"]:
        t["action_spec"]["params"]["threads"] = 1
    stitch = next(t for t in q["tasks"] if t["node_id"] == "stitch")
    stitch["action_spec"]["params"]["tiling"]["seam_check"] = False
    lost = q["tasks"][0]
    assert lost["action_spec"]["params"]["tiling"]["tiles"] == ["T_0_0", "T_0_2"]
    lost["action_spec"]["env"] = {EXIT_HOOK: "1"}
    qfile = tmp_path / "queue.json"
    qfile.write_text(json.dumps(q))
    ops = tmp_path / "ops"
    r = dome_cli("run", str(qfile), "--ops-root", str(ops), "--json", timeout=1100)
    run = json.loads(r.stdout.strip().splitlines()[-1])
    assert run.get("status") == "promoted", (run, r.stderr[-4000:])
    events = [json.loads(x) for x in dome_cli("events", run["run_id"], "--ops-root", str(ops), "--json").stdout.splitlines()]
    mine = [e for e in events if e.get("node_id") == lost["node_id"]]
    assert [e["topic"] for e in mine if e["topic"] in ("task.dispatched", "task.failed", "task.completed")] == [
        "task.dispatched", "task.failed", "task.dispatched", "task.completed"]
    puts = [e["payload"]["name"] for e in mine if e["topic"] == "artifact.put"
            and (e["payload"].get("name") or "").startswith("resume/")]
    assert puts == ["resume/litho.tile/T_0_0", "resume/litho.tile/T_0_2"]  # one by the lost attempt, one by the retry
    summary = next(e["payload"]["summary"] for e in mine if e["topic"] == "task.completed")
    assert summary["tiles_restored"] == ["T_0_0"] and summary["tiles_resumed"] == ["T_0_0"]
    assert summary["tiles_run"] == ["T_0_2"]  # the retry optimised only the tile that was not finished

    full = api.optimize(_in(reference, {**REQ, "tiling": {**REQ["tiling"], "seam_check": False}}))
    assert full["tiling"]["stitched"]
    assert _show(repo, "masks/two.oas") == (reference / "masks" / "two.oas").read_bytes()  # byte-identical
    for tid in [t.tile_id for t in plan.tiles]:
        assert _show(repo, f"masks/two.tiles/raw/{tid}.npy") == (reference / "masks/two.tiles/raw" / f"{tid}.npy").read_bytes()


def _show(repo: Path, path: str) -> bytes:
    import subprocess

    return subprocess.run(["git", "show", f"refs/heads/masks:{path}"], cwd=repo, check=True, capture_output=True).stdout
