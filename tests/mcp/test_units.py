"""Pure parts of the host: normalization, porcelain bounds, truncation, consent tokens, faults."""
from __future__ import annotations

import json

import pytest

from coordinator.mcp import render
from coordinator.mcp.catalog import default_specs
from coordinator.mcp.consent import ConsentBook
from coordinator.mcp.faults import Fault, FaultCategory, ToolInputError
from coordinator.mcp.normalization import ToolNames, normalize_arguments
from coordinator.mcp.validation import CompiledTool

SPECS = default_specs(include_test=False)


def test_tool_name_aliases_and_spellings():
    names = ToolNames(SPECS)
    assert names.resolve("evaluate") == "evaluate"
    assert names.resolve("eval") == "evaluate"
    assert names.resolve("litho.optimize") == "optimize"
    assert names.resolve("openLayout") == "open_layout"
    assert names.resolve("run_promote") == "promote"
    assert names.resolve("no_such_tool") is None


def test_argument_normalization_is_unambiguous_only(tmp_path):
    spec = SPECS["evaluate"]
    args, notes = normalize_arguments(spec, {"file": f"file://{tmp_path}/a.glp", "reportLevel": "DETAILED",
                                             "halo_nm": "128", "mask": "sha256:" + "0" * 64})
    assert args == {"layout": f"{tmp_path}/a.glp", "report_level": "detailed", "halo_nm": 128,
                    "mask": "sha256:" + "0" * 64}  # a digest is never turned into a path
    assert len(notes) == 5
    args, _ = normalize_arguments(spec, {"layout": "x.glp", "file": "y.glp"})  # target already given: not applied
    assert "file" in args
    args, notes = normalize_arguments(SPECS["open_layout"], {"path": "~/l.gds"})
    assert args["path"].endswith("/l.gds") and not args["path"].startswith("~")


def test_validation_names_the_offending_field():
    tool = CompiledTool(SPECS["query_region"])
    with pytest.raises(ToolInputError) as e:
        tool.validate({"session_id": "ses_0123456789ab", "box": {"left": 0, "bottom": 0, "right": 1, "top": 1},
                       "max_shape": 3})
    assert e.value.details["unknown_fields"] == ["max_shape"] and "max_shapes" in e.value.details["allowed_fields"]
    assert "'max_shape'" in e.value.message
    with pytest.raises(ToolInputError) as e:
        tool.validate({"session_id": "ses_0123456789ab"})
    assert e.value.details["field"] == "box" and "'box'" in e.value.message
    with pytest.raises(ToolInputError) as e:
        tool.validate({"session_id": "ses_0123456789ab", "box": {"left": "a", "bottom": 0, "right": 1, "top": 1}})
    assert e.value.details["field"] == "box" and "box/left" in e.value.message
    assert e.value.details["errors"][0]["path"] == "/box/left"


def test_porcelain_is_bounded_and_summary_first():
    result = {"status": "ok", "items": list(range(100)), "nested": {"a": {"b": "x" * 1000}},
              **{f"k{i}": i for i in range(100)}, "schema_version": "1.0.0",
              "provenance": {"inputs_hash": "sha256:1", "outputs_hash": "sha256:2"}}
    text = render.porcelain("tool", result, notes=["field a -> b"])
    lines = text.splitlines()
    assert lines[0] == "ok tool status=ok" and lines[1] == "note: field a -> b"
    assert len(lines) <= render.MAX_LINES and all(len(x) <= render.MAX_LINE_CHARS for x in lines)
    assert lines[-1].startswith("truncated: ")
    assert text == render.porcelain("tool", result, notes=["field a -> b"])  # deterministic


def test_large_results_truncated_with_metadata_and_artifact(tmp_path):
    big = {"schema_version": "1.0.0", "violations": [{"i": i, "pad": "x" * 200} for i in range(5000)]}
    out = render.bound_structured(big, tmp_path)
    assert len(json.dumps(out)) <= render.MAX_STRUCTURED_BYTES + 1000
    t = out["truncation"]
    assert t["truncated"] and t["omitted_items"]["violations"] == 5000 - len(out["violations"])
    assert json.loads(open(t["artifact"]["path"]).read()) == big


def test_consent_tokens_single_use_and_scoped(tmp_path):
    book = ConsentBook(tmp_path, "lenient")
    token = book.mint("promote", "run-1")
    with pytest.raises(Exception) as e:
        book.check_and_spend("promote", "run-2", token)
    assert e.value.code == "CONSENT_INVALID"
    assert book.check_and_spend("promote", "run-1", token)["mode"] == "lenient"
    with pytest.raises(Exception) as e:
        book.check_and_spend("promote", "run-1", token)
    assert e.value.code == "CONSENT_INVALID"
    with pytest.raises(Exception) as e:
        book.check_and_spend("promote", "run-1", token[:-2] + "xx")
    assert e.value.code == "CONSENT_INVALID"


def test_faults_are_model_shaped():
    f = Fault(FaultCategory.PROCESS, "worker died:\n" + "Traceback (most recent call last) " * 40)
    obj = f.to_object()
    assert obj["category"] == "process" and obj["retry"] == "light" and f.restart
    assert "\n" not in obj["message"] and len(obj["message"]) <= 200
    for cat in FaultCategory:
        assert Fault(cat, "x").to_object()["retry"] in ("none", "light", "heavy")
