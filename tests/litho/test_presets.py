"""Named optimize recipes: what a preset fills in, what the caller keeps, and that mrc-quality
gives a mask that passes the mask rules and prints every shape once at every corner."""
from __future__ import annotations

import klayout.db as kdb
import numpy as np
import pytest

from registry.errors import DomeError
from worker_sdk.litho import api
from worker_sdk.litho.__main__ import _parser, _request
from worker_sdk.litho.ilt import ILTConfig
from worker_sdk.litho.layout import load_mask_png, raster_to_region
from worker_sdk.litho.presets import PRESETS, apply_preset

from .conftest import glp


def test_preset_fills_only_what_the_request_leaves_out():
    req = apply_preset({"layout": "a.glp", "preset": "mrc-quality", "pvb_weight": 0.5, "mrc": {"min_area_nm2": 900}})
    assert req["pvb_weight"] == 0.5  # the caller's value wins
    assert req["band_weight"] == PRESETS["mrc-quality"]["band_weight"]
    assert req["bridge_weight"] == 4.0
    assert req["mrc"] == {"min_feature_nm": 9, "min_space_nm": 9, "min_area_nm2": 900, "halo_nm": 2048}
    assert apply_preset({"layout": "a.glp"}) == {"layout": "a.glp"}


def test_weights_reach_the_ilt_config_and_zero_is_kept():
    cfg = ILTConfig.from_request(apply_preset({"preset": "mrc-quality", "band_weight": 0.0, "seed": 3}))
    assert (cfg.pvb_weight, cfg.band_weight, cfg.bridge_weight, cfg.seed) == (0.15, 0.0, 4.0, 3)
    assert ILTConfig.from_request({}) == ILTConfig()


def test_unknown_preset_is_a_typed_error_before_any_work(tmp_path):
    with pytest.raises(DomeError) as exc:
        api.optimize({"layout": str(tmp_path / "missing.glp"), "out": str(tmp_path / "m.png"), "preset": "best"})
    assert "preset" in str(exc.value)
    assert not (tmp_path / "m.png").exists()
    with pytest.raises(DomeError) as direct:
        apply_preset({"preset": "best"})
    assert direct.value.code == "LITHO_UNKNOWN_PRESET"


def test_cli_flags_carry_the_preset_and_the_weights():
    args = _parser().parse_args(["optimize", "--layout", "a.glp", "--out", "m.oas", "--preset", "mrc-quality",
                                 "--pvb-weight", "0.2", "--band-weight", "0"])
    req = _request(args)
    assert (req["preset"], req["pvb_weight"], req["band_weight"]) == ("mrc-quality", 0.2, 0.0)
    with pytest.raises(SystemExit):
        _parser().parse_args(["optimize", "--layout", "a.glp", "--out", "m.oas", "--preset", "best"])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_mrc_quality_preset_gives_a_rule_clean_topology_clean_mask(iccad13, litho_env, tmp_path):
    out = tmp_path / "m10.png"
    r = api.optimize({"layout": str(glp(10, iccad13)), "out": str(out), "threads": 1, "preset": "mrc-quality"})
    assert r["mask"]["mask_rules"] == PRESETS["mrc-quality"]["mrc"]
    assert r["ilt"]["preset"] == "mrc-quality" and r["ilt"]["pvb_weight"] == 0.15
    topo = r["metrics"]["topology"]
    assert all(sum(len(v) if isinstance(v, list) else int(v) for v in topo[c].values()) == 0
               for c in ("nominal", "max", "min")), topo
    region = raster_to_region(np.asarray(load_mask_png(out)) > 0)
    proj = kdb.Metrics.Projection
    assert region.width_check(9, False, proj).count() == 0
    assert region.space_check(9, False, proj).count() == 0
    assert region.with_area(None, 400, False).count() == 0
    assert r["metrics"]["l2_nm2"] < 7_500  # 10,491 with the 256 nm halo and the default weights


def test_a_tile_folder_is_pinned_to_the_preset_filled_settings(iccad13, litho_env, tmp_path):
    from worker_sdk.litho import tiledjob

    folder = {"dir": str(tmp_path / "tiles")}
    base = {"layout": str(glp(10, iccad13)), "threads": 1, "tiling": folder}
    tiledjob.prepare({**base, "preset": "mrc-quality"})
    spelled_out = {k: v for k, v in PRESETS["mrc-quality"].items()}
    tiledjob.prepare({**base, **spelled_out})  # the same settings written out: the same pin
    with pytest.raises(DomeError) as exc:
        tiledjob.prepare(base)  # the defaults are other ILT and mask-rule settings
    assert exc.value.code == "LITHO_TILE_PLAN_MISMATCH"
    assert {"ilt", "mrc"} <= set(exc.value.details["differs"])
