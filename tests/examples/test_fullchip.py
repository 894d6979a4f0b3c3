"""The fullchip example's quick variant end to end through `dome run`.

IHP SG13G2 Metal1 (scaled to the ICCAD 2013 node), a 3 um crop tiled 4 x 4:
tile tasks in parity waves, each seeing its finished neighbours through its
derived base, the mask clean-up per tile and the seam windows' re-simulation
in the waves, a stitch task that redoes and cleans no tile, a full-layout evaluation
with violations deduplicated across tiles, re-simulation as validation,
promotion, and `dome verify`. The tile workers' peak RSS is recorded.
3.5 minutes on the 2-core machine at load average 4-7, about 10 at load
average 10-16 (then: tile tasks 2 min, the stitch task 4.5 min, evaluation
and validation the rest).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, dome_cli, git

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def _make_repo_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("fullchip_make_repo", REPO_ROOT / "examples" / "fullchip" / "make_repo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory, iccad13: Path) -> dict:
    make_repo = _make_repo_module()
    base = tmp_path_factory.mktemp("fullchip")
    repo = make_repo.make_repo(base / "repo", iccad13, variants=("work.quick.json",))
    queue = json.loads((REPO_ROOT / "examples" / "fullchip" / "work.quick.json").read_text())
    queue["repo"] = str(repo)
    qfile = base / "work.quick.json"
    qfile.write_text(json.dumps(queue))
    ops = base / "ops"
    r = dome_cli("run", str(qfile), "--ops-root", str(ops), "--json", timeout=1700)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    lines = dome_cli("events", out["run_id"], "--ops-root", str(ops), "--json").stdout.splitlines()
    return {"repo": repo, "ops": ops, "queue": queue, "run": out, "stderr": r.stderr,
            "events": [json.loads(x) for x in lines]}


def _completed(q: dict) -> dict[str, dict]:
    return {e["node_id"]: e["payload"] for e in q["events"] if e["topic"] == "task.completed"}


def test_quick_fullchip_runs_tiles_in_waves_stitches_and_is_promoted(quick: dict) -> None:
    run = quick["run"]
    assert run["status"] == "promoted", quick["stderr"][-4000:]
    ref = quick["queue"]["promote_to"]
    files = set(git(quick["repo"], "ls-tree", "-r", "--name-only", ref).splitlines())
    assert {"masks/block_quick.oas", "masks/block_quick.litho.json", "masks/block_quick.evaluate.json"} <= files
    cores = sorted(f for f in files if f.startswith("masks/block_quick.tiles/raw/") and f.endswith(".npy"))
    assert len(cores) == 16
    done = _completed(quick)
    tile_tasks = [t for t in quick["queue"]["tasks"] if t["node_id"].startswith("tiles-")]
    ran = sorted(tid for t in tile_tasks for tid in done[t["node_id"]]["summary"]["tiles_run"])
    assert len(ran) == 16 and len(set(ran)) == 16  # every tile optimised exactly once
    # waves: a batch starts only after the batches of its neighbours finished
    order = [e["node_id"] for e in quick["events"] if e["topic"] in ("task.dispatched", "task.completed")]
    for t in tile_tasks:
        for dep in t["dependencies"]:
            assert order.index(f"{dep}") < order.index(t["node_id"])
    stitch = done["stitch"]["summary"]
    assert stitch["metrics"]["l2_nm2"] < stitch["baseline_metrics"]["l2_nm2"]
    report = json.loads(git(quick["repo"], "show", f"{ref}:masks/block_quick.litho.json"))
    assert report["tiling"]["tiles_run"] == [] and len(report["tiling"]["tiles_resumed"]) == 16
    # the clean-up ran in the waves: every tile cleaned once by a tile or clean-up task, none by the stitch
    cleaned = sorted(tid for n, p in done.items() if n.startswith(("tiles-", "clean-"))
                     for tid in p["summary"].get("tiles_cleaned", []))
    assert len(cleaned) == 16 and len(set(cleaned)) == 16 and report["tiling"]["tiles_cleaned"] == []
    assert report["tiling"]["seam_check"]["passed"], report["tiling"]["seam_check"]
    # the seam windows were re-simulated in the waves, each once; the stitch only compared
    seamed = sorted(sid for n, p in done.items() if n.startswith("seams-") for sid in p["summary"]["seams_checked"])
    assert len(seamed) == len(set(seamed)) == report["tiling"]["seam_check"]["windows"] == 9
    assert report["tiling"]["seam_check"]["windows_in_waves"] == 9
    # every tile was evaluated once in the waves, by a seam task; the stitch only summed the records
    judged = sorted(tid for n, p in done.items() if n.startswith("seams-") for tid in p["summary"]["tiles_evaluated"])
    assert len(judged) == len(set(judged)) == 16 and report["tiling"]["tiles_evaluated_in_waves"] == 16
    # the tile workers' memory is one tile's, whatever the layout
    rss = [done[t["node_id"]]["summary"]["peak_rss_mb"] for t in tile_tasks]
    print(f"fullchip quick: tile worker peak RSS max {max(rss):.0f} MiB; stitch {report['tiling']['peak_rss_mb']:.0f} MiB")
    assert max(rss) < 2048 and report["tiling"]["peak_rss_mb"] < 2048
    # the evaluation task reports its own peak as well (the benchmark's per-kind memory reads it)
    assert 0 < done["evaluate"]["summary"]["peak_rss_mb"] < 2048


def test_full_layout_evaluation_dedups_violations_and_resim_passes(quick: dict) -> None:
    ref = quick["queue"]["promote_to"]
    ev = json.loads(git(quick["repo"], "show", f"{ref}:masks/block_quick.evaluate.json"))
    assert ev["provenance"]["tiles"] == 16 and ev["report_level"] == "detailed"
    assert ev["provenance"]["tiles_evaluated_in_waves"] == 16  # made from the records, nothing simulated again
    viols = ev["violations"]
    assert viols and {v["dedup_strategy"] for v in viols} <= {"canonical", "shadow"}
    groups: dict[str, list[str]] = {}
    for v in viols:
        groups.setdefault(v["violation_group_id"], []).append(v["dedup_strategy"])
    assert all(s.count("canonical") == 1 for s in groups.values())  # one canonical record per group
    reports = [e["payload"] for e in quick["events"] if e["topic"] == "integration.validation_report"
               and e["payload"].get("suite") == "litho_resim" and e["payload"].get("head_ref") == quick["run"]["head"]]
    assert reports and reports[-1]["result"] == "passed"
    # the re-simulation vouched for every figure of both reports, from one simulation of the mask
    every = reports[-1]["summary"]["evidence"][0]["checks"]
    checks = {c["report"]: c for c in every if "target" not in c}
    assert set(checks) == {"masks/block_quick.litho.json", "masks/block_quick.evaluate.json"}
    assert all(c["passed"] and c["got"] == c["expected"] for c in every)
    assert checks["masks/block_quick.evaluate.json"]["expected"]["violation_count"] == ev["violation_count"]
    assert "tiling.per_tile" in checks["masks/block_quick.litho.json"]["expected"]
    # and what the stitched report states of the target (its "before", each tile's too), from one
    # simulation of the target
    (target,) = [c for c in every if "target" in c]
    assert target["report"] == "masks/block_quick.litho.json"
    assert set(target["expected"]) == {"baseline_metrics", "tiling.per_tile"}
    assert len(target["expected"]["tiling.per_tile"]) == 16
    assert reports[-1]["summary"]["metrics"]["simulations"] == 2


def test_dome_verify_accepts_the_fullchip_run(quick: dict) -> None:
    r = dome_cli("verify", quick["run"]["run_id"], "--ops-root", str(quick["ops"]), "--json")
    assert r.returncode == 0, r.stdout[-3000:]


def test_stopping_the_run_cancels_every_tile_task(tmp_path: Path, iccad13: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    make_repo = _make_repo_module()
    repo = make_repo.make_repo(tmp_path / "repo", iccad13, variants=("work.quick.json",))
    queue = json.loads((REPO_ROOT / "examples" / "fullchip" / "work.quick.json").read_text())
    queue["repo"] = str(repo)
    qfile = tmp_path / "work.quick.json"
    qfile.write_text(json.dumps(queue))
    ops = tmp_path / "ops"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    p = subprocess.Popen([sys.executable, "-m", "coordinator.cli.main", "run", str(qfile), "--ops-root", str(ops), "--json"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = 0
    deadline = time.monotonic() + 300
    assert p.stderr is not None
    for line in p.stderr:  # the live view, one line per event without a TTY
        if "task.dispatched tiles-" in line:
            seen += 1
        if seen >= 2 or time.monotonic() > deadline:
            break
    assert seen >= 2
    time.sleep(2)
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=300)
    run = json.loads(out.strip().splitlines()[-1])
    assert run["status"] == "cancelled"
    events = [json.loads(x) for x in dome_cli("events", run["run_id"], "--ops-root", str(ops), "--json").stdout.splitlines()]
    dispatched = {e["node_id"] for e in events if e["topic"] == "task.dispatched"}
    ended = {e["node_id"] for e in events if e["topic"] in ("task.cancelled", "task.completed", "task.failed")}
    assert dispatched and dispatched <= ended  # every tile task in flight was stopped (or had finished)
    assert any(e["topic"] == "task.cancelled" for e in events)
    assert "stitch" not in dispatched


def test_report_shows_the_quick_crop_as_a_tile_map_in_chromium(quick: dict, tmp_path: Path) -> None:
    # the run the fixture made: the report adds one picture render of the crop (tile by tile, from
    # the tile folder's evaluation records) and one headless Chromium page load
    import base64
    import io
    import re

    from PIL import Image

    from tests.report.test_report_page import rendered

    page = tmp_path / "report.html"
    r = dome_cli("report", quick["run"]["run_id"], "--ops-root", str(quick["ops"]), "--html", str(page), timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    dom = rendered(page, 760, tmp_path)
    overflow = re.search(r'data-overflow="(-?\d+)"', dom)
    assert overflow is not None and int(overflow.group(1)) <= 0  # readable in a laptop-sized window
    svg = re.search(r'<svg class="tilemap".*?</svg>', dom, re.S)
    assert svg is not None
    links = re.findall(r'<a href="#(tile-[^"]+)" data-tile="([^"]+)"', svg.group(0))
    assert len(links) == 16 and len({t for _, t in links}) == 16
    for anchor, tile_id in links:  # a click lands on the tile's block, which holds its picture
        block = re.search(rf'<div class="tile" id="{re.escape(anchor)}">(.*?)</div>', dom, re.S)
        assert block is not None, anchor
        img = re.search(r'src="data:image/png;base64,([^"]+)"', block.group(1))
        assert img is not None, f"no picture for {tile_id}"
        assert Image.open(io.BytesIO(base64.b64decode(img.group(1)))).size[0] > 0
    # the colours say something: the stitched crop's tiles gained L2 on the whole
    report = json.loads(git(quick["repo"], "show", f"{quick['queue']['promote_to']}:masks/block_quick.litho.json"))
    per_tile = report["tiling"]["per_tile"]
    assert len(per_tile) == 16
    assert sum(t["l2_nm2"] for t in per_tile) < sum(t["l2_before_nm2"] for t in per_tile)
