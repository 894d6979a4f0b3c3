"""Process windows, the batch path, thread choice and the optimize CLI's mask-rule flags."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from registry.errors import DomeError, SchemaValidationError
from registry.schema_store import validate
from tests.conftest import dome_cli
from worker_sdk.litho import api, engine
from worker_sdk.litho.errors import BadRequest
from worker_sdk.litho.layout import load_layout, load_mask_png, placement, rasterize
from worker_sdk.litho.metrics import label
from worker_sdk.litho.threads import ENV_GRANTED, choose_threads

from .conftest import TWO_LINES_GLP, glp

# ----- process window ---------------------------------------------------------------------

def test_default_window_is_the_named_iccad13_pair_and_the_grid_is_reported_apart(iccad13, litho_env):
    layout = str(glp(1, iccad13))
    base = api.evaluate({"layout": layout, "threads": 1})
    assert base["metrics"]["corners"] == "iccad13" and "pvb_grid_nm2" not in base["metrics"]
    assert base["provenance"]["process_window"]["pvb_corners"] == ["max", "min"]
    same = api.evaluate({"layout": layout, "threads": 1, "corners": [
        {"name": "nominal", "kernels": "focus", "dose": 1.0}, {"name": "max", "kernels": "focus", "dose": 1.02},
        {"name": "min", "kernels": "defocus", "dose": 0.98}]})
    keys = ("l2_nm2", "pvb_nm2", "epe_violations", "topology")
    assert {k: same["metrics"][k] for k in keys} == {k: base["metrics"][k] for k in keys}
    assert same["metrics"]["corners"] == "custom"
    grid = api.evaluate({"layout": layout, "threads": 1, "pvb_grid": True})
    m = grid["metrics"]
    assert m["pvb_nm2"] == base["metrics"]["pvb_nm2"]  # the published PVB is untouched by the option
    # the grid holds both ICCAD corners, so its band contains theirs; on test 1 it is 13.5% wider
    assert (m["pvb_nm2"], m["pvb_grid_nm2"]) == (45874, 52072)
    assert [c["name"] for c in grid["provenance"]["process_window"]["grid"]] == [
        "grid:defocus@0.98", "grid:defocus@1", "grid:defocus@1.02", "grid:focus@0.98", "grid:focus@1", "grid:focus@1.02"]
    validate("litho/evaluate_response", grid)
    wider = api.evaluate({"layout": layout, "threads": 1, "corners": [
        {"name": "nominal", "kernels": "focus", "dose": 1.0}, {"name": "hi", "kernels": "focus", "dose": 1.05},
        {"name": "lo", "kernels": "defocus", "dose": 0.95}]})
    assert wider["metrics"]["pvb_nm2"] > base["metrics"]["pvb_nm2"]
    assert set(wider["metrics"]["topology"]) == {"nominal", "hi", "lo"}


@pytest.mark.parametrize("corners,code", [
    ([{"name": "max", "kernels": "focus", "dose": 1.02}, {"name": "a", "kernels": "focus", "dose": 1.0},
      {"name": "min", "kernels": "defocus", "dose": 0.98}], "LITHO_BAD_CORNERS"),  # no nominal
    ([{"name": "nominal", "kernels": "focus", "dose": 1.0}, {"name": "x", "kernels": "blurred", "dose": 1.0},
      {"name": "y", "kernels": "focus", "dose": 1.0}], "LITHO_BAD_CORNERS"),  # no such kernel set
    ("iccad14", SchemaValidationError.code),  # not a named window
])
def test_unusable_windows_are_typed_errors(iccad13, litho_env, corners, code):
    with pytest.raises(DomeError) as exc:
        api.evaluate({"layout": str(glp(4, iccad13)), "corners": corners})
    assert exc.value.code == code


# ----- batch path ---------------------------------------------------------------------------

def test_batch_evaluation_equals_per_clip_evaluation_bit_for_bit(iccad13, litho_env, model64, monkeypatch):
    reqs = [{"layout": str(glp(n, iccad13)), "report_level": "detailed", "threads": 1} for n in (4, 8, 10)]
    singles = [api.dumps(api.evaluate(r)) for r in reqs]
    shapes = []
    real = engine.print_masks

    def spy(model, masks, corners, **kw):
        shapes.append(len(masks))
        return real(model, masks, corners, **kw)

    monkeypatch.setattr(engine, "print_masks", spy)
    budget = 2 * engine.bytes_per_clip(model64) + 1
    assert engine.clips_per_batch(model64, budget) == 2 and engine.clips_per_batch(model64, 0) == 1
    batched = [api.dumps(r) for r in api.evaluate_batch(reqs, memory_budget_bytes=budget)]
    assert shapes == [2, 1]  # two clips in one [2, N, N] call, then the third
    assert batched == singles


def test_batch_float32_stays_within_the_float32_tolerance(iccad13, model32, model64):
    clips = [engine.ClipInput(load_layout(glp(n, iccad13))) for n in (4, 10)]
    masks = [engine._prepare(model32, c, "lithobench")[2] for c in clips]
    stacked = model32.aerial(torch.as_tensor(np.stack(masks), dtype=torch.float32))
    ref = model64.aerial(torch.as_tensor(np.stack(masks), dtype=torch.float64))
    for i, m in enumerate(masks):
        alone = model32.aerial(torch.as_tensor(m, dtype=torch.float32))
        for name in ("nominal", "max", "min"):
            assert float((stacked[name][i] - alone[name][0]).abs().max()) <= 2e-6
            assert float((stacked[name][i].double() - ref[name][i]).abs().max()) <= 2e-6
    evs = engine.evaluate_batch(model32, clips, memory_bytes=1 << 40)
    for c, ev in zip(clips, evs):
        one = engine.evaluate(model32, c.layout)
        assert (ev.l2, ev.pvb, ev.epe) == (one.l2, one.pvb, one.epe)


def test_batch_refuses_layouts_that_need_tiling(iccad13, litho_env, tmp_path):
    big = tmp_path / "big.glp"
    big.write_text(TWO_LINES_GLP.replace("RECT N M1 140 0 80 400", "RECT N M1 3000 0 80 400"))
    with pytest.raises(BadRequest) as exc:
        api.evaluate_batch([{"layout": str(big)}])
    assert exc.value.code == "LITHO_BATCH_NEEDS_CLIPS"


# ----- threads --------------------------------------------------------------------------------

def test_threads_come_from_the_request_then_the_granted_cpus(monkeypatch):
    import os

    monkeypatch.delenv(ENV_GRANTED, raising=False)
    assert choose_threads() == len(os.sched_getaffinity(0))
    monkeypatch.setenv(ENV_GRANTED, "3")
    assert choose_threads() == 3
    assert choose_threads(1) == 1
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(ENV_GRANTED, bad)
        with pytest.raises(BadRequest) as exc:
            choose_threads()
        assert exc.value.code == "LITHO_BAD_THREADS"


def test_fft_self_test_is_rerun_for_each_thread_count():
    from worker_sdk.litho import fftsafe

    before = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            fftsafe.self_test(256, "cpu", (torch.float64,))
            assert (256, "cpu", "torch.float64", n) in fftsafe._passed  # the bug depends on the count
    finally:
        torch.set_num_threads(before)


def test_selftest_runs_with_the_threads_it_is_granted(litho_env):
    proc = dome_cli("litho", "selftest", "--json", env={**litho_env, ENV_GRANTED: "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["threads"] == 1
    proc = dome_cli("litho", "selftest", "--threads", "2", "--json", env={**litho_env, ENV_GRANTED: "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["threads"] == 2
    proc = dome_cli("litho", "selftest", "--json", env={**litho_env, ENV_GRANTED: "none"}, timeout=300)
    assert proc.returncode == 2 and json.loads(proc.stdout)["error"]["code"] == "LITHO_BAD_THREADS"


# ----- optimize CLI: every mask rule of the queue is a flag --------------------------------------

def test_every_mask_rule_the_queue_takes_is_an_optimize_flag():
    from worker_sdk.litho.__main__ import MRC_FLAGS, _parser, _request

    schema = json.loads((Path(__file__).resolve().parents[2] / "registry/schemas/litho/optimize_request.json").read_text())
    keys = set(schema["properties"]["mrc"]["properties"])
    assert keys == set(MRC_FLAGS)
    argv = ["optimize", "--layout", "l.glp", "--out", "m.oas"]
    for i, key in enumerate(sorted(keys)):
        argv += [MRC_FLAGS[key], str(11 + 2 * i)]
    req = _request(_parser().parse_args(argv))
    assert req["mrc"] == {key: 11 + 2 * i for i, key in enumerate(sorted(keys))}
    validate("litho/optimize_request", req)
    assert "mrc" not in _request(_parser().parse_args(["optimize", "--layout", "l.glp", "--out", "m.oas"]))


def test_optimize_cli_honours_each_mask_rule(iccad13, litho_env, tmp_path):
    import klayout.db as kdb

    from worker_sdk.litho.layout import raster_to_region

    lay = tmp_path / "two_lines.glp"
    lay.write_text(TWO_LINES_GLP)
    out = tmp_path / "mask.png"
    proc = dome_cli("litho", "optimize", "--layout", str(lay), "--out", str(out), "--iterations", "4",
                    "--min-feature", "11", "--min-space", "12", "--min-area", "5000", "--mrc-halo", "40",
                    "--threads", "1", "--corners", "iccad13", "--json", env=litho_env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["mask"]["mask_rules"] == {"min_feature_nm": 11, "min_space_nm": 12, "min_area_nm2": 5000, "halo_nm": 40}
    assert doc["ilt"]["threads"] == 1
    mask = load_mask_png(out).astype(bool)
    target = rasterize(load_layout(lay), "lithobench", 2048, placement(load_layout(lay), "lithobench", 2048)).astype(bool)
    ys, xs = np.nonzero(target)
    mys, mxs = np.nonzero(mask)
    assert mys.min() >= ys.min() - 40 and mys.max() <= ys.max() + 40  # halo
    assert mxs.min() >= xs.min() - 40 and mxs.max() <= xs.max() + 40
    labels, n = label(mask)
    assert n >= 1 and np.bincount(labels[mask])[1:].min() >= 5000  # min area (islands)
    region = raster_to_region(mask)
    assert region.width_check(11, False, kdb.Metrics.Projection).is_empty()  # min feature
    assert region.space_check(12, False, kdb.Metrics.Projection).is_empty()  # min space
    bad = dome_cli("litho", "optimize", "--layout", str(lay), "--out", str(out), "--min-feature", "10", "--json",
                   env=litho_env, timeout=300)
    assert bad.returncode == 2 and json.loads(bad.stdout)["error"]["code"] == "LITHO_BAD_MASK_RULES"
    assert "iteration" not in bad.stderr  # refused before any ILT work


def test_window_and_thread_flags_become_schema_valid_requests():
    from worker_sdk.litho.__main__ import _parser, _request

    for cmd, schema, extra in (("eval", "litho/evaluate_request", []),
                               ("optimize", "litho/optimize_request", ["--out", "m.oas"]),
                               ("simulate", "litho/simulate_request", [])):
        req = _request(_parser().parse_args([cmd, "--layout", "l.glp", *extra, "--threads", "1", "--corners",
                                             "nominal:focus:1,hi:focus:1.03,lo:defocus:0.97", "--pvb-grid", "0.97,1,1.03"]))
        assert req["threads"] == 1 and req["pvb_grid"] == {"doses": [0.97, 1.0, 1.03]}
        assert req["corners"] == [{"name": "nominal", "kernels": "focus", "dose": 1.0},
                                  {"name": "hi", "kernels": "focus", "dose": 1.03},
                                  {"name": "lo", "kernels": "defocus", "dose": 0.97}]
        validate(schema, req)
        plain = _request(_parser().parse_args([cmd, "--layout", "l.glp", *extra, "--pvb-grid", "--corners", "iccad13"]))
        assert plain["pvb_grid"] is True and plain["corners"] == "iccad13" and "threads" not in plain
        validate(schema, plain)
    with pytest.raises(SystemExit):
        _parser().parse_args(["eval", "--layout", "l.glp", "--corners", "nominal:focus"])
