"""Worker intents: litho.optimize writes mask + metrics into the scratch checkout; litho.resim re-checks them."""
from __future__ import annotations

import json
import shutil

from worker_sdk.cancel import CancellationToken
from worker_sdk.intents import IntentContext, resolve, resolve_suite

from .conftest import glp, two_lines_with_masks


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
    assert ok.summary["passed"] is True and ok.summary["checked"] == 2  # the mask's figures, the target's
    assert (ok.metrics["masks_checked"], ok.metrics["targets_checked"]) == (1, 1)
    report["metrics"]["l2_nm2"] += 1  # a report that no longer matches its mask
    (git_repo / "masks" / "t8.litho.json").write_text(json.dumps(report))
    bad = suite(IntentContext(scratch=git_repo, action={}, seed=0, token=CancellationToken()))
    assert bad.summary["passed"] is False and bad.summary["failed"][0]["mask"] == "masks/t8.oas"
    report["metrics"]["l2_nm2"] -= 1
    report["baseline_metrics"]["pvb_nm2"] -= 1  # a "before" that is not the target's
    (git_repo / "masks" / "t8.litho.json").write_text(json.dumps(report))
    bad = suite(IntentContext(scratch=git_repo, action={}, seed=0, token=CancellationToken()))
    (failed,) = bad.summary["failed"]
    assert failed["target"] == "M1_test8.glp" and failed["mask"] is None
    assert [m["figure"] for m in failed["mismatches"]] == ["baseline_metrics.pvb_nm2"]
    assert (bad.metrics["masks_failed"], bad.metrics["targets_failed"]) == (0, 1)


def test_topology_suite_fails_a_mask_that_bridges_and_passes_a_clean_one(tmp_path, litho_env):
    report = two_lines_with_masks(tmp_path)
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


def test_topology_suite_runs_from_a_work_queue_in_the_validation_sandbox(git_repo, iccad13):
    from coordinator.integration.canvas import Checkpoint
    from coordinator.integration.validation import SuiteRunner
    from tests.conftest import git

    shutil.copytree(iccad13 / "kernels_bin", git_repo / "kernels" / "iccad13" / "kernels_bin")  # as a queue ships them
    report = two_lines_with_masks(git_repo)
    (git_repo / "clean.litho.json").write_text(json.dumps(report))
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-qm", "clean mask")

    def run():
        cp = Checkpoint("cp-0001", 1, git(git_repo, "rev-parse", "HEAD"), git(git_repo, "rev-parse", "HEAD^{tree}"),
                        "", ("p",), ("p",))
        return SuiteRunner(git_repo)(cp, {"suite": "litho.topology", "name": "litho_topology", "threads": 1,
                                          "kernels": "kernels/iccad13"})

    rep = run()
    assert rep["result"] == "passed", rep["summary"]
    (git_repo / "clean.litho.json").write_text(json.dumps({**report, "mask": "bridged.png"}))
    git(git_repo, "commit", "-qam", "a mask that bridges")
    rep = run()
    assert rep["result"] == "failed", rep["summary"]


def test_topology_suite_is_a_registered_validation_suite():
    from coordinator.integration.validation import DOMAIN_SUITES
    from worker_sdk.intents import SUITES

    assert DOMAIN_SUITES["litho.topology"] == SUITES["litho.topology"] == "worker_sdk.litho.intents:topology"
