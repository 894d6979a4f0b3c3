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
