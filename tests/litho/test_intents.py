"""Worker intents: litho.optimize writes mask + metrics into the scratch checkout; litho.resim re-checks them."""
from __future__ import annotations

import json
import shutil

from worker_sdk.cancel import CancellationToken
from worker_sdk.intents import IntentContext, resolve, resolve_suite

from .conftest import glp


def test_optimize_intent_then_resim_suite(git_repo, iccad13, litho_env):
    shutil.copy(glp(8, iccad13), git_repo / "M1_test8.glp")
    seen = []
    ctx = IntentContext(scratch=git_repo, action={"layout": "M1_test8.glp", "out": "masks/t8.oas", "iterations": 8},
                        seed=5, token=CancellationToken(), progress=lambda f, m="": seen.append(f))
    result = resolve("litho.optimize")(ctx)
    assert (git_repo / "masks" / "t8.oas").exists() and (git_repo / "masks" / "t8.png").exists()
    report = json.loads((git_repo / "masks" / "t8.litho.json").read_text())
    assert report["metrics"] == result.metrics and report["ilt"]["seed"] == 5
    assert result.evidence[0]["kind"] == "litho.optimize" and result.evidence[0]["files"]["mask"] == "masks/t8.oas"
    assert seen and seen[-1] == 1.0
    suite = resolve_suite("litho.resim")
    ok = suite(IntentContext(scratch=git_repo, action={}, seed=0, token=CancellationToken()))
    assert ok.summary["passed"] is True and ok.summary["checked"] == 1
    report["metrics"]["l2_nm2"] += 1  # a report that no longer matches its mask
    (git_repo / "masks" / "t8.litho.json").write_text(json.dumps(report))
    bad = suite(IntentContext(scratch=git_repo, action={}, seed=0, token=CancellationToken()))
    assert bad.summary["passed"] is False and bad.summary["failed"][0]["mask"] == "masks/t8.oas"


def test_topology_suite_fails_a_mask_that_bridges_and_passes_a_clean_one(tmp_path, litho_env):
    import numpy as np

    from worker_sdk.litho.layout import load_layout, placement, rasterize, save_mask_png

    (tmp_path / "two_lines.glp").write_text(
        "BEGIN\nEQUIV 1 1000 MICRON +X,+Y\nCNAME Temp_Top\nLEVEL M1\n\nCELL Temp_Top PRIME\n"
        "   RECT N M1 0 0 80 400\n   RECT N M1 140 0 80 400\nENDMSG\n")
    layout = load_layout(tmp_path / "two_lines.glp")
    target = rasterize(layout, "lithobench", 2048, placement(layout, "lithobench", 2048))
    save_mask_png(target, tmp_path / "clean.png")
    ys, xs = np.nonzero(target)
    bridged = target.copy()
    bridged[(ys.min() + ys.max()) // 2 - 20:(ys.min() + ys.max()) // 2 + 20, xs.min():xs.max() + 1] = 1
    save_mask_png(bridged, tmp_path / "bridged.png")
    report = {"layout": "two_lines.glp", "mask": "clean.png", "fill": "lithobench", "metrics": {}}
    (tmp_path / "clean.litho.json").write_text(json.dumps(report))
    suite = resolve_suite("litho.topology")
    ok = suite(IntentContext(scratch=tmp_path, action={"threads": 1}, seed=0, token=CancellationToken()))
    assert ok.summary["passed"] is True and ok.summary["checked"] == 1 and ok.metrics["topology_defects"] == 0
    (tmp_path / "bridged.litho.json").write_text(json.dumps({**report, "mask": "bridged.png"}))
    bad = suite(IntentContext(scratch=tmp_path, action={"threads": 1}, seed=0, token=CancellationToken()))
    assert bad.summary["passed"] is False and bad.summary["checked"] == 2
    (failed,) = bad.summary["failed"]
    assert failed["mask"] == "bridged.png" and failed["topology"]["nominal"]["bridge"] == 1
    assert bad.metrics["topology_defects"] == 3  # the bridge prints at all three corners


def test_topology_suite_is_a_registered_validation_suite():
    from coordinator.integration.validation import DOMAIN_SUITES
    from worker_sdk.intents import SUITES

    assert DOMAIN_SUITES["litho.topology"] == SUITES["litho.topology"] == "worker_sdk.litho.intents:topology"
