"""Every litho result carries the standard provenance block inside the result, beside the engine's own."""
from __future__ import annotations

import copy

from registry.canonical import digest_json
from registry.provenance import STANDARD_KEYS, inputs_hash, stamp
from worker_sdk.litho import api

from .conftest import glp

ENGINE_KEYS = {"engine", "model", "kernels", "layout", "rule_deck"}


def _check_block(result: dict, tool: str) -> dict:
    prov = result["provenance"]
    assert set(STANDARD_KEYS) <= set(prov) and ENGINE_KEYS <= set(prov), sorted(prov)
    assert prov["tool"] == tool and prov["revision_id"] is None
    assert prov["outputs_hash"] == digest_json({k: v for k, v in result.items() if k != "provenance"})
    assert {"dome.litho", "python", "torch", "numpy"} <= set(prov["engine_versions"])
    return prov


def test_evaluate_and_simulate_carry_the_standard_block(iccad13, litho_env, tmp_path):
    layout = str(glp(1, iccad13))
    spelled = api.evaluate({"layout": layout, "fill": "lithobench", "report_level": "aggregate"})
    prov = _check_block(spelled, "evaluate")
    assert prov["seed"] is None
    # a request that leaves the engine's defaults out is the same input, so it hashes alike
    bare = api.evaluate({"layout": layout})
    assert bare["provenance"]["fill"] == "lithobench" and bare["provenance"]["inputs_hash"] == prov["inputs_hash"]
    assert prov["inputs_hash"] == inputs_hash({"layout": layout, "fill": "lithobench", "report_level": "aggregate"})
    exact = api.evaluate({"layout": layout, "fill": "exact"})["provenance"]
    assert exact["inputs_hash"] != prov["inputs_hash"] and exact["outputs_hash"] != prov["outputs_hash"]
    # a host that stamps results leaves the engine's block (and so the bytes) untouched
    assert stamp(copy.deepcopy(spelled), {"layout": layout}, tool="evaluate") == spelled
    sim = api.simulate({"layout": layout, "fill": "exact"})
    _check_block(sim, "simulate")


def test_optimize_block_names_the_seed(iccad13, litho_env, tmp_path):
    out = api.optimize({"layout": str(glp(1, iccad13)), "iterations": 2, "seed": 7, "out": str(tmp_path / "m.oas")})
    prov = _check_block(out, "optimize")
    assert prov["seed"] == 7 == out["ilt"]["seed"]
