"""litho.resim judges the result, not the step: every figure a committed report states about a
mask must come out of the mask's own re-simulation.

The tiled queue's stitch and evaluation task sum the tiles' evaluations that seam-task
workers made in the waves. Here those steps run as real intents on the two-clip layout (six
tiles; the cores are stored as an ILT would leave them), then one evaluation record is made
false the way a dishonest seam worker could: an EPE marker dropped, so L2 and PVB stay
exact. The suite runs once, in the validation sandbox, on a checkout that holds the false
reports, honest copies, and copies with one figure each changed by hand; one simulation of
the mask answers for all of them, and one of the target for what they state about it.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import git
from worker_sdk.cancel import CancellationToken
from worker_sdk.intents import IntentContext, resolve
from worker_sdk.litho import resim, tiled
from worker_sdk.litho.ilt import ILTConfig
from worker_sdk.litho.layout import load_layout
from worker_sdk.litho.streaming import pack_bits, unpack_bits

from .test_clean_in_waves import MRC, _raw_store
from .test_tiled import two_clips, write_oas

TILES = "masks/two.tiles"
COMMON = {"layout": "layouts/two.oas", "out": "masks/two.oas", "fill": "lithobench", "seed": 0, "iterations": 2, "mrc": MRC,
          "threads": 1}


def _run(repo: Path, intent: str, action: dict) -> None:
    resolve(intent)(IntentContext(scratch=repo, action=action, seed=0, token=CancellationToken()))


def _stitch_and_evaluate(repo: Path) -> tuple[dict, dict]:
    """The stitch task and the evaluation task of the tile queue, as intents: both sum the records."""
    _run(repo, "litho.optimize", {**COMMON, "tiling": {"dir": TILES, "stitch": True}})
    _run(repo, "litho.evaluate", {"layout": "layouts/two.oas", "mask": "masks/two.oas", "report_level": "detailed",
                                  "out": "masks/two.evaluate.json", "tiles": TILES, "threads": 1})
    return (json.loads((repo / "masks" / "two.litho.json").read_text()),
            json.loads((repo / "masks" / "two.evaluate.json").read_text()))


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _put(repo: Path, rel: str, report: dict) -> None:
    (repo / rel).parent.mkdir(parents=True, exist_ok=True)
    (repo / rel).write_text(json.dumps(report, sort_keys=True))


def _tampered(litho: dict, ev: dict) -> dict[str, tuple[str, dict, str]]:
    """name -> (path, an honest report with one figure changed, the figures it changes)."""
    out: dict[str, tuple[str, dict, str]] = {}

    def edit(name: str, report: dict, suffix: str, figure: str, change) -> None:
        copy = json.loads(json.dumps(report))
        change(copy)
        out[name] = (f"tampered/{name}/two{suffix}", copy, figure)

    edit("topology", litho, ".litho.json", "metrics.topology.nominal.missing",
         lambda r: r["metrics"]["topology"]["nominal"].update(missing=r["metrics"]["topology"]["nominal"]["missing"] + 1))
    edit("epe_mean", litho, ".litho.json", "metrics.epe_mean_nm",
         lambda r: r["metrics"].update(epe_mean_nm=r["metrics"]["epe_mean_nm"] + 0.001))

    def shift_l2(r: dict) -> None:  # one tile's L2 moved to another: the totals are unchanged
        a, b = r["tiling"]["per_tile"][0], r["tiling"]["per_tile"][1]
        a["l2_nm2"], b["l2_nm2"] = a["l2_nm2"] - 1, b["l2_nm2"] + 1
    edit("per_tile", litho, ".litho.json", "tiling.per_tile[0].l2_nm2 tiling.per_tile[1].l2_nm2", shift_l2)
    edit("digest", litho, ".litho.json", "mask_file_digest", lambda r: r.update(mask_file_digest="sha256:" + "1" * 64))
    # what the report states of the target: the "before" its gains are measured from
    edit("baseline", litho, ".litho.json", "baseline_metrics.l2_nm2",
         lambda r: r["baseline_metrics"].update(l2_nm2=r["baseline_metrics"]["l2_nm2"] + 1))
    edit("before", litho, ".litho.json", "tiling.per_tile[2].l2_before_nm2",
         lambda r: r["tiling"]["per_tile"][2].update(l2_before_nm2=r["tiling"]["per_tile"][2]["l2_before_nm2"] + 7))
    edit("provenance", ev, ".evaluate.json", "provenance.placement_shift_nm[0]",
         lambda r: r["provenance"]["placement_shift_nm"].__setitem__(0, r["provenance"]["placement_shift_nm"][0] + 1))
    edit("epe", ev, ".evaluate.json", "metrics.epe_violations",
         lambda r: r["metrics"].update(epe_violations=r["metrics"]["epe_violations"] + 1))
    edit("count", ev, ".evaluate.json", "violation_count", lambda r: r.update(violation_count=r["violation_count"] - 1))
    edit("violation", ev, ".evaluate.json", "violations[3].location_nm[0]",
         lambda r: r["violations"][3]["location_nm"].__setitem__(0, r["violations"][3]["location_nm"][0] + 1))
    return out


def _falsify(path: Path) -> None:
    """A dishonest seam worker's evaluation record, L2 and PVB kept: one EPE marker dropped, and
    in the nominal print one wrong pixel put right and one made wrong far from any shape
    (a stray shape that prints)."""
    import numpy as np

    rec = json.loads(path.read_text())
    after = rec["after"]
    after["epe_records"].pop()
    shape = tuple(after["shape"])
    target = unpack_bits(after["target"], shape)
    prints = {k: unpack_bits(v, shape) for k, v in after["prints"].items()}
    nominal = prints["nominal"]
    anything = target | nominal | prints["max"] | prints["min"]
    beside = np.roll(nominal, 1, 0) | np.roll(nominal, -1, 0) | np.roll(nominal, 1, 1) | np.roll(nominal, -1, 1)
    ys, xs = np.nonzero(target & ~nominal & beside)
    nominal[ys[-1], xs[-1]] = True  # one pixel short of the target printed by the shape beside it ...
    near = np.zeros_like(anything)  # pixels within 8 px of anything
    for dy in range(-8, 9):
        for dx in range(-8, 9):
            near |= np.roll(np.roll(anything, dy, 0), dx, 1)
    ys, xs = np.nonzero(~near[8:-8, 8:-8])
    nominal[ys[0] + 8, xs[0] + 8] = True  # ... and one far from any shape: the same L2, a stray print
    after["prints"]["nominal"] = pack_bits(nominal)
    path.write_text(json.dumps(rec, sort_keys=True) + "\n")


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory: pytest.TempPathFactory, iccad13: Path, model32) -> dict:
    from coordinator.integration.canvas import Checkpoint
    from coordinator.integration.validation import SuiteRunner

    repo = tmp_path_factory.mktemp("resim") / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    shutil.copytree(iccad13 / "kernels_bin", repo / "kernels" / "iccad13" / "kernels_bin")  # as a queue ships them
    layout = load_layout(write_oas(two_clips(iccad13), _mkdir(repo / "layouts") / "two.oas"))
    plan = tiled.plan_layout(layout, model32, "lithobench")
    store = _raw_store(repo / TILES, plan, layout, ILTConfig.from_request({"iterations": 2, "mrc": MRC, "seed": 0}))
    for t in plan.tiles:  # clean cores: the raw ones
        store.put_raw("clean", t.tile_id, store.raw_bytes("raw", t.tile_id), store.info("raw", t.tile_id))
    ids = [t.tile_id for t in plan.tiles]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DOME_ICCAD13_DATA", str(iccad13))
        # the seam tasks' work in the waves: seam windows and the tiles' evaluations
        _run(repo, "litho.optimize", {**COMMON, "tiling": {"dir": TILES, "tiles": ids, "stitch": False,
                                                           "seams": [w.tile_id for w in tiled.seam_windows(plan)],
                                                           "evaluate": ids}})
        litho, ev = _stitch_and_evaluate(repo)
        _falsify(repo / TILES / "evals" / "T_0_1.json")  # a tile that prints (T_0_0 prints nothing)
        false_litho, false_ev = _stitch_and_evaluate(repo)
    for false in (false_litho, false_ev):  # what the old check compared is exact
        assert (false["metrics"]["l2_nm2"], false["metrics"]["pvb_nm2"]) == \
            (litho["metrics"]["l2_nm2"], litho["metrics"]["pvb_nm2"])
        assert false["metrics"]["topology"]["nominal"]["extra"] == litho["metrics"]["topology"]["nominal"]["extra"] + 1
    assert false_litho["metrics"]["epe_violations"] == litho["metrics"]["epe_violations"] - 1
    _put(repo, "honest/two.litho.json", litho)
    _put(repo, "honest/two.evaluate.json", ev)
    tampered = _tampered(litho, ev)
    for rel, report, _ in tampered.values():
        _put(repo, rel, report)
    stale = json.loads(json.dumps(ev))
    stale["provenance"]["mask"]["digest"] = "sha256:" + "0" * 64  # a mask that is not in the checkout
    _put(repo, "stale/two.evaluate.json", stale)
    _put(repo, "notes/x.evaluate.json", {"tool": "something else"})
    (repo / "broken").mkdir()
    (repo / "broken" / "junk.oas").write_bytes(b"not a layout")
    _put(repo, "broken/two.litho.json", {**litho, "mask": "broken/junk.oas"})  # a mask the engine cannot read
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "masks and reports")
    head = git(repo, "rev-parse", "HEAD")
    cp = Checkpoint("cp-0001", 1, head, git(repo, "rev-parse", "HEAD^{tree}"), "", ("p",), ("p",))
    report = SuiteRunner(repo)(cp, {"suite": "litho.resim", "name": "litho_resim", "threads": 1,
                                    "kernels": "kernels/iccad13"})
    every = report["summary"]["evidence"][0]["checks"]
    checks = {c["report"]: c for c in every if "target" not in c}  # each report's check of its mask
    targets = {c["report"]: c for c in every if "target" in c}  # a mask report's check of its target
    return {"report": report, "checks": checks, "targets": targets, "tampered": tampered, "honest": (litho, ev)}


def test_a_false_wave_record_that_keeps_l2_and_pvb_fails_the_suite_in_the_sandbox(suite_run):
    rep = suite_run["report"]
    assert rep["result"] == "failed", rep["summary"]
    checks = suite_run["checks"]
    for name in ("masks/two.litho.json", "masks/two.evaluate.json"):  # made by the stitch and evaluation tasks
        c = checks[name]
        assert c["passed"] is False and c["mask"] == "masks/two.oas"
        figures = {m["figure"]: m for m in c["mismatches"]}
        extra = figures["metrics.topology.nominal.extra"]
        assert extra["got"] == extra["expected"] - 1  # the stray print is the record's, not the mask's
        assert not {"metrics.l2_nm2", "metrics.pvb_nm2"} & set(figures)
    stitched = {m["figure"]: m for m in checks["masks/two.litho.json"]["mismatches"]}
    assert stitched["metrics.epe_violations"]["got"] == stitched["metrics.epe_violations"]["expected"] + 1
    assert "tiling.per_tile" not in stitched  # the per-tile L2 stayed too
    evaluated = {m["figure"] for m in checks["masks/two.evaluate.json"]["mismatches"]}
    assert "violation_count" in evaluated and "len(violations)" in evaluated  # the stray print was listed
    assert checks["honest/two.litho.json"]["passed"] and checks["honest/two.evaluate.json"]["passed"]
    assert checks["honest/two.litho.json"]["got"] == checks["honest/two.litho.json"]["expected"]
    assert len(suite_run["honest"][1]["violations"]) == suite_run["honest"][1]["violation_count"] > 3
    # one streamed evaluation for every report of the mask, one of the target for every mask report
    assert rep["summary"]["metrics"]["simulations"] == 2
    targets = suite_run["targets"]
    assert set(targets) == {n for n in checks if n.endswith(".litho.json")}
    honest = targets["honest/two.litho.json"]
    assert honest["passed"] and honest["target"] == "layouts/two.oas" and honest["mask"] is None
    assert set(honest["expected"]) == {"baseline_metrics", "tiling.per_tile"}
    assert targets["masks/two.litho.json"]["passed"]  # the false record was of the mask; the target's are true


def test_each_figure_changed_alone_fails_and_is_named_with_both_values(suite_run):
    checks = suite_run["checks"]
    for name, (rel, report, figures) in suite_run["tampered"].items():
        of_report = [c for c in (checks.get(rel), suite_run["targets"].get(rel)) if c is not None]
        assert [c["passed"] for c in of_report].count(False) == 1, name  # the mask's check or the target's
        c = next(c for c in of_report if not c["passed"])
        assert ("target" in c) == (name in ("baseline", "before")), name
        assert [m["figure"] for m in c["mismatches"]] == figures.split(), name
        assert c["mismatch_count"] == len(c["mismatches"]) and all(m["expected"] != m["got"] for m in c["mismatches"])
    stale = checks["stale/two.evaluate.json"]
    assert stale["passed"] is False and "evaluated mask" in stale["reason"]
    assert checks["notes/x.evaluate.json"]["passed"] is False
    broken = checks["broken/two.litho.json"]
    assert broken["passed"] is False and broken["reason"].startswith("not re-simulated: LITHO_")
    failed = {c["report"] for c in suite_run["report"]["summary"]["summary"]["failed"]}
    assert failed == {c for c in checks if not c.startswith("honest/")}


@pytest.mark.parametrize("stated, got, figures", [
    ({"a": 1}, {"a": 1.0}, ["a"]),  # the JSON type counts: 1 is not 1.0
    ({"a": True}, {"a": 1}, ["a"]),
    ({"a": [1, 2]}, {"a": [1, 2, 3]}, ["len(a)"]),
    ({"a": {"b": 1}}, {"a": {}}, ["a.b"]),  # a figure the re-simulation lacks
    ({"a": 1}, {"a": 1, "b": 2}, []),  # a figure the report leaves out states nothing
    ({"v": [{"x": 1}, {"x": 2}]}, {"v": [{"x": 1}, {"x": 3}]}, ["v[1].x"]),
])
def test_differences_are_exact_and_name_each_figure(stated, got, figures):
    found: list[dict] = []
    resim.differences("", stated, got, found)
    assert [m["figure"] for m in found] == figures
