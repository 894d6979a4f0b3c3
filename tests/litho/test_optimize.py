"""optimize: ILT output, determinism, violation_id resolution (RFC 0006 §5) and cancellation (§1 G2)."""
from __future__ import annotations

import gc
import json
import time

import numpy as np
import pytest
import torch

from tests.conftest import dome_cli
from worker_sdk.litho import api, pins
from worker_sdk.litho.engine import evaluate
from worker_sdk.litho.errors import CacheEvicted, LayoutNotPinned
from worker_sdk.litho.ilt import ILTConfig, Stage, cleanup
from worker_sdk.litho.iltbatch import optimize_mask
from worker_sdk.litho.jobs import start_job
from worker_sdk.litho.layout import load_layout, rasterize
from worker_sdk.litho.violations import encode_violation_id

from .conftest import glp, wait_until_iterating

FAST = ILTConfig(stages=(Stage(8, 12, 0.2), Stage(4, 6, 0.1)))


def test_ilt_improves_l2_and_is_deterministic(model32, model64, iccad13):
    layout = load_layout(glp(4, iccad13))
    target = rasterize(layout, "lithobench")
    a = optimize_mask(model32, target, FAST)
    b = optimize_mask(model32, target, FAST)
    assert np.array_equal(a.mask, b.mask) and a.loss_history == b.loss_history
    assert a.loss_history[-1] < a.loss_history[0]
    before = evaluate(model64, layout, fill="lithobench")
    after = evaluate(model64, layout, mask=a.mask, fill="lithobench")
    assert after.l2 < before.l2 * 0.6


def test_cleanup_removes_small_islands_and_holes():
    m = np.zeros((128, 128), dtype=np.uint8)
    m[20:80, 20:80] = 1
    m[50:52, 50:52] = 0  # 4 nm2 hole
    m[100:102, 100:102] = 1  # 4 nm2 island
    m[20:80, 90:91] = 1  # 1 nm sliver
    out = cleanup(m, 4, 64)
    assert out[20:80, 20:80].all() and out[100:102, 100:102].sum() == 0 and out[:, 90].sum() == 0


def test_optimize_cli_writes_oasis_that_reproduces_its_metrics(iccad13, tmp_path, litho_env):
    out = tmp_path / "mask.oas"
    proc = dome_cli("litho", "optimize", "--layout", str(glp(10, iccad13)), "--out", str(out),
                    "--iterations", "12", "--seed", "3", "--json", env=litho_env)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.strip()]
    assert len(lines) == 1
    doc = lines[0]
    assert doc["status"] == "completed" and doc["ilt"]["seed"] == 3 and doc["ilt"]["iterations"] == 12
    assert out.exists() and out.with_suffix(".png").exists()
    assert doc["metrics"]["l2_nm2"] < doc["baseline_metrics"]["l2_nm2"]
    again = api.evaluate({"layout": str(glp(10, iccad13)), "mask": str(out)})
    assert again["metrics"]["l2_nm2"] == doc["metrics"]["l2_nm2"]
    assert again["metrics"]["pvb_nm2"] == doc["metrics"]["pvb_nm2"]
    assert "iteration" in proc.stderr


def test_violation_id_resolution_paths(iccad13, litho_env):
    layout = str(glp(1, iccad13))
    ev = api.evaluate({"layout": layout, "report_level": "detailed", "tile": "always", "session_id": "s1", "pin": True})
    aid = ev["layout_artifact_id"]
    shadows = [v for v in ev["violations"] if v["dedup_strategy"] == "shadow"]
    assert shadows, "a 2x2 tiling of test 1 cuts some error regions"
    shadow = shadows[0]
    canonical = next(v for v in ev["violations"] if v["violation_group_id"] == shadow["violation_group_id"]
                     and v["dedup_strategy"] == "canonical")
    group = api.resolve_violation({"violation_id": shadow["violation_id"], "session_id": "s1"})
    assert group["resolved_via"] == "session_cache" and group["was_shadow"] is True
    assert group["resolved_violation_id"] == canonical["violation_id"]
    assert group["location_nm"] == shadow["dedup_provenance"]["canonical_location_nm"]
    rec = api.resolve_violation({"violation_id": shadow["violation_id"], "session_id": "s1", "scope": "record_only"})
    assert rec["resolved_violation_id"] == shadow["violation_id"] and rec["location_nm"] == shadow["location_nm"]
    # a fresh session has no cache: without a pinned layout that is layout_not_pinned ...
    with pytest.raises(LayoutNotPinned) as exc:
        api.resolve_violation({"violation_id": shadow["violation_id"], "session_id": "s2"})
    assert exc.value.code == "LAYOUT_NOT_PINNED"
    # ... and with the pinned layout the id resolves by itself, to the same place
    self_desc = api.resolve_violation({"violation_id": shadow["violation_id"], "session_id": "s2",
                                       "layout_artifact_id": aid})
    assert self_desc["resolved_via"] == "self_describing_id"
    assert {k: self_desc[k] for k in ("resolved_violation_id", "location_nm", "fill", "rule_id")} == \
        {k: group[k] for k in ("resolved_violation_id", "location_nm", "fill", "rule_id")}


def test_cache_evicted_is_distinct(iccad13, litho_env):
    aid = pins.pin_layout(glp(1, iccad13))
    foreign = encode_violation_id("sha256:" + "00" * 32, "0123456789abcdef", 0, (10.0, 10.0), "LITHO.L2.AREA")
    cache = pins.SessionCache(capacity=1)
    old, pins.CACHE = pins.CACHE, cache
    try:
        cache.put("s3", foreign, {"layout": str(glp(1, iccad13)), "layer": "M1", "fill": "lithobench"})
        assert api.resolve_violation({"violation_id": foreign, "session_id": "s3"})["resolved_via"] == "session_cache"
        cache.put("s3", "v-other", {})  # evicts the first entry
        with pytest.raises(CacheEvicted) as exc:
            api.resolve_violation({"violation_id": foreign, "session_id": "s3", "layout_artifact_id": aid})
        assert exc.value.code == "CACHE_EVICTED"
    finally:
        pins.CACHE = old


def _big_tensors() -> int:
    gc.collect()
    return sum(o.numel() for o in gc.get_objects() if type(o) is torch.Tensor or type(o) is torch.nn.Parameter and o.numel() >= 200_000)


def test_cancel_running_optimize_stops_within_one_second(iccad13, tmp_path, litho_env, model64, model32):
    baseline = _big_tensors()
    job = start_job("optimize", {"layout": str(glp(1, iccad13)), "iterations": 100000,
                                     "out": str(tmp_path / "never.oas")})
    wait_until_iterating(job)
    assert job.poll()["status"] == "running"
    job.cancel()
    job.join(timeout=10)
    assert not job.thread.is_alive()
    stopped = job.stopped_at - job.cancel_requested_at
    assert stopped < 1.0, f"took {stopped:.2f}s to stop"
    assert job.poll()["status"] == "cancelled"
    counter = job.progress["iteration"]
    time.sleep(0.3)
    assert job.progress["iteration"] == counter < 100000
    assert not (tmp_path / "never.oas").exists()
    assert _big_tensors() <= baseline  # every large tensor of the job was released
