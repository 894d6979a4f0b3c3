"""The evaluate contract through the CLI and the in-process API (RFC 0006 §2-§4, stdio hygiene)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from registry.errors import SchemaValidationError
from registry.schema_store import validate
from tests.conftest import dome_cli
from worker_sdk.litho import api
from worker_sdk.litho.consumer import actionable, canonical_only, to_native
from worker_sdk.litho.layout import load_layout, rasterize, save_mask_png, write_mask_layout

from .conftest import glp


def _json_lines(stdout: str) -> list[dict]:
    lines = [line for line in stdout.splitlines() if line.strip()]
    return [json.loads(line) for line in lines]  # every stdout line must parse


def test_eval_cli_aggregate_is_byte_identical_to_api(iccad13, litho_env):
    layout = str(glp(1, iccad13))
    proc = dome_cli("litho", "eval", "--layout", layout, "--fill", "exact", "--report-level", "aggregate", "--json",
                    env=litho_env)
    assert proc.returncode == 0, proc.stderr
    docs = _json_lines(proc.stdout)
    assert len(docs) == 1
    doc = docs[0]
    m = doc["metrics"]
    assert (m["l2_nm2"], m["pvb_nm2"], m["fill"]) == (116661, 42918, "exact")
    assert all(isinstance(m[k], int) for k in ("l2_nm2", "pvb_nm2", "epe_violations"))
    assert doc["schema_version"] == "1.1.0" and doc["provenance"]["fill"] == "exact"
    validate("litho/evaluate_response", doc)
    in_proc = api.dumps(api.evaluate({"layout": layout, "fill": "exact", "report_level": "aggregate"}))
    assert proc.stdout.strip() == in_proc
    assert "[litho]" in proc.stderr  # progress went to stderr


def test_eval_detailed_violations_follow_the_schema(iccad13, litho_env):
    layout = str(glp(2, iccad13))
    proc = dome_cli("litho", "eval", "--layout", layout, "--report-level", "detailed", "--json", env=litho_env)
    assert proc.returncode == 0, proc.stderr
    (doc,) = _json_lines(proc.stdout)
    validate("litho/evaluate_response", doc)
    assert doc["degraded_to_aggregate"] is False
    viols = doc["violations"]
    assert len(viols) == doc["violation_count"] > 0
    rules = {v["rule_id"] for v in viols}
    # no OPC on clip 2: two thin shapes vanish at the min corner
    assert rules == {"LITHO.L2.AREA", "LITHO.PVB.AREA", "LITHO.EPE.15NM", "LITHO.TOPO.MISSING"}
    assert sum(v["rule_id"].startswith("LITHO.TOPO.") for v in viols) == doc["metrics"]["topology_defects"] == 2
    assert sum(v["rule_id"] == "LITHO.EPE.15NM" for v in viols) == doc["metrics"]["epe_violations"]
    l2_area = sum(v["context"]["area_nm2"] for v in viols if v["rule_id"] == "LITHO.L2.AREA")
    assert l2_area == doc["metrics"]["l2_nm2"]  # the records partition the aggregate
    for v in viols:
        validate("litho/violation", v)
        assert v["coordinate_frame"] == "post_transform_canvas"
        assert v["dedup_provenance"]["rule_deck_hash"] == doc["rule_deck"]["hash"]
        nx, ny = to_native(v)
        assert [nx, ny] == v["context"]["location_native_nm"]
    again = api.evaluate({"layout": layout, "report_level": "detailed"})
    assert [v["violation_group_id"] for v in again["violations"]] == [v["violation_group_id"] for v in viols]


def test_requests_closed_responses_open(iccad13):
    with pytest.raises(SchemaValidationError):
        api.evaluate({"layout": str(glp(1, iccad13)), "report_levle": "detailed"})
    with pytest.raises(SchemaValidationError):
        api.optimize({"layout": str(glp(1, iccad13)), "iteratons": 3})
    resp = {"schema_version": "1.3.0", "report_level": "detailed", "metrics": {"l2_nm2": 1, "pvb_nm2": 2,
            "epe_violations": 0, "fill": "exact", "new_metric": 3.5}, "provenance": {}, "brand_new_field": [1],
            "violations": []}
    validate("litho/evaluate_response", resp)


def test_unknown_coordinate_frame_is_tolerated_not_acted_on():
    v = {"violation_id": "v" + "a" * 56, "violation_group_id": "0" * 16, "rule_id": "LITHO.L2.AREA",
         "rule_deck": "d", "severity": "error", "coordinate_frame": "wafer_global", "location_nm": [1.0, 2.0],
         "transforms": [], "context": {"tile_id": "T_0_0"}, "dedup_strategy": "canonical",
         "dedup_provenance": {"rule_deck_hash": "x", "radius_nm": 1.0, "rule_id": "LITHO.L2.AREA"}}
    validate("litho/violation", v)
    assert actionable(v) is False
    validate("litho/violation", {**v, "coordinate_frame": "some_future_frame"})
    assert actionable({**v, "coordinate_frame": "some_future_frame"}) is False
    assert actionable({**v, "coordinate_frame": "post_transform_canvas"}) is True
    assert canonical_only([v, {**v, "dedup_strategy": "shadow"}]) == [v]


def test_conditional_path_degrades_to_aggregate_and_says_so(iccad13):
    layout = str(glp(1, iccad13))
    full = api.evaluate({"layout": layout, "report_level": "detailed"})
    low = api.evaluate({"layout": layout, "report_level": "detailed", "violation_count_max": 3})
    assert low["degraded_to_aggregate"] is True and low["degraded_reason"] == "violation_count_max"
    assert "violations" not in low and low["metrics"] == full["metrics"]
    validate("litho/evaluate_response", low)


def test_capabilities_matrix_is_data():
    caps = api.describe()
    validate("litho/capabilities", caps)
    values = {p["detailed"] for p in caps["engine_paths"].values()}
    assert values <= {"single_pass", "rerun_required", "conditional", "unsupported"}
    cond = [p for p in caps["engine_paths"].values() if p["detailed"] == "conditional"]
    assert cond and cond[0]["precondition"]["on_exceeded"] == "degrade_to_aggregate"


def test_png_and_layout_masks(iccad13, tmp_path, litho_env):
    layout_path = glp(1, iccad13)
    # the A2-ILT PNG of test 1 is the exact-fill target at the same placement
    png = iccad13 / "targets_png_a2ilt" / "t1_0_mask.png"
    proc = dome_cli("litho", "eval", "--layout", str(layout_path), "--mask", str(png), "--fill", "exact", "--json",
                    env=litho_env)
    assert proc.returncode == 0, proc.stderr
    (doc,) = _json_lines(proc.stdout)
    assert (doc["metrics"]["l2_nm2"], doc["metrics"]["pvb_nm2"]) == (116661, 42918)
    assert doc["provenance"]["mask"]["kind"] == "png"
    # the target written as OASIS geometry is the same mask
    layout = load_layout(layout_path)
    target = rasterize(layout, "lithobench")
    from worker_sdk.litho.layout import placement

    oas = tmp_path / "t1.oas"
    write_mask_layout(target, oas, placement(layout, "lithobench"))
    # the lithobench raster of the target is itself a polygon set; re-rasterized exactly it must round-trip
    back = rasterize(load_layout(oas), "exact", shift=placement(layout, "lithobench"))
    assert np.array_equal(back, target)


def test_bad_input_is_a_typed_json_error(tmp_path, litho_env):
    proc = dome_cli("litho", "eval", "--layout", str(tmp_path / "missing.glp"), "--json", env=litho_env)
    assert proc.returncode == 2
    (doc,) = _json_lines(proc.stdout)
    assert doc["error"]["code"] == "LITHO_LAYOUT_FORMAT" and doc["status"] == "failed"
    bad_png = tmp_path / "small.png"
    save_mask_png(np.ones((10, 10)), bad_png)
    proc = dome_cli("litho", "eval", "--layout", str(tmp_path / "missing.glp"), "--mask", str(bad_png), "--json",
                    env=litho_env)
    assert proc.returncode == 2


def test_coordinator_side_never_imports_torch():
    import subprocess
    import sys

    code = ("import sys, coordinator.cli.litho_cmd, coordinator.cli.main; "
            "assert 'torch' not in sys.modules and 'worker_sdk.litho' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
