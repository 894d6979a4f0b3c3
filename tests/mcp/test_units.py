"""Pure parts of the host: normalization, porcelain bounds, truncation, consent tokens, faults."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.errors import DomeError

from coordinator.mcp import render
from coordinator.mcp.catalog import default_specs
from coordinator.mcp.consent import ConsentBook
from coordinator.mcp.faults import Fault, FaultCategory
from coordinator.mcp.normalization import ToolNames, normalize_arguments
from coordinator.toolcore import InputSchema, ToolInputError

SPECS = default_specs(include_test=False)


def CompiledTool(spec):  # noqa: N802 - the front door compiles each tool's schema this way (ToolHost.compiled)
    return InputSchema(spec.name, spec.input_schema, spec.contract_id)


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
    args, _ = normalize_arguments(spec, {"layout": "/x.glp", "file": "/y.glp"})  # target already given: not applied
    assert "file" in args
    args, notes = normalize_arguments(SPECS["open_layout"], {"path": "~/l.gds"})
    assert args["path"].endswith("/l.gds") and not args["path"].startswith("~")


def test_validation_names_the_offending_field():
    tool = CompiledTool(SPECS["query_region"])
    with pytest.raises(DomeError) as e:
        tool.validate({"session_id": "ses_0123456789ab", "box": {"left": 0, "bottom": 0, "right": 1, "top": 1},
                       "max_shape": 3})
    assert e.value.code == "INVALID_TARGET" and e.value.details["unknown_fields"] == ["max_shape"]
    assert "max_shapes" in e.value.details["allowed_fields"] and "'max_shape'" in e.value.message
    with pytest.raises(DomeError) as e:
        tool.validate({"session_id": "ses_0123456789ab"})
    assert e.value.code == "INVALID_BOX" and e.value.details["field"] == "box"
    with pytest.raises(DomeError) as e:
        tool.validate({"session_id": "ses_0123456789ab", "box": {"left": "a", "bottom": 0, "right": 1, "top": 1}})
    assert e.value.code == "INVALID_BOX" and e.value.details["field"] == "box/left"
    assert e.value.details["errors"][0]["path"] == "/box/left"
    # a contract without codes of its own keeps the generic one
    with pytest.raises(ToolInputError):
        CompiledTool(SPECS["evaluate"]).validate({"no_such_field": 1})


def test_klayout_schema_failures_get_contract_codes_and_name_nested_fields():
    """A nested required field is named (never 'None'); each failure maps to one of the contract's codes."""
    from worker_sdk.klayout_tools.errors import CONTRACT_CODES

    cases = [("query_region", {"session_id": "ses_0123456789ab", "box": {"left": 0, "bottom": 0, "right": 1}},
              "INVALID_BOX", "box/top"),
             ("query_region", {"session_id": "ses_0123456789ab", "box": {"left": 0, "bottom": 0, "right": 1, "top": 1},
                               "layers": [{"layer": "x"}]}, "INVALID_LAYER", None),
             ("render_view", {"session_id": "ses_0123456789ab", "image_size": {"width": 10}}, "INVALID_TARGET",
              "image_size/height"),
             ("open_layout", {}, "INVALID_TARGET", "path")]
    for tool, args, code, field in cases:
        with pytest.raises(DomeError) as e:
            CompiledTool(SPECS[tool]).validate(args)
        assert e.value.code == code and code in CONTRACT_CODES, (tool, e.value.to_object())
        assert "None" not in e.value.message
        if field is not None:
            assert e.value.details["field"] == field and repr(field) in e.value.message


def test_relative_paths_are_refused_not_resolved_against_the_host_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "chip.gds").write_bytes(b"x")
    with pytest.raises(DomeError) as e:
        normalize_arguments(SPECS["open_layout"], {"path": "chip.gds"})
    assert e.value.code == "INVALID_TARGET" and e.value.details["reason"] == "not_absolute"
    assert str(tmp_path) not in str(e.value.to_object())
    with pytest.raises(DomeError) as e:
        normalize_arguments(SPECS["evaluate"], {"layout": "./chip.glp"})
    assert e.value.code == "INVALID_REQUEST" and e.value.details["field"] == "layout"


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


def test_group_fix_lists_every_group_member_as_resolved():
    """RFC 0006 2c: optimize(violation_id=shadow) resolves to the canonical record; all members are listed."""
    from worker_sdk.litho import api, pins
    from worker_sdk.litho.violations import encode_violation_id

    deck = "sha256:" + "ab" * 32
    loc = (1000.0, 2000.0)
    members = [encode_violation_id(deck, "1f" * 8, i, loc, "LITHO.EPE.15NM", offset=(i * 8.0, 0.0)) for i in range(3)]
    other = encode_violation_id(deck, "2e" * 8, 0, (5.0, 5.0), "LITHO.EPE.15NM")
    session = "unit-group-fix"
    for vid in members + [other]:
        gid = "1f" * 8 if vid in members else "2e" * 8
        pins.CACHE.put(session, vid, {"violation": {"violation_id": vid, "violation_group_id": gid},
                                      "layout": "/x.glp", "layer": None, "fill": "exact", "canonical_location": [0, 0]})
    try:
        gid = api.resolve_violation({"violation_id": members[2], "session_id": session}, model=object())["violation_group_id"]
        res = api.resolve_violation({"violation_id": members[2], "session_id": session}, model=object())
        assert res["resolved_violation_id"] == members[0] and res["was_shadow"] is True
        assert res["resolved_by_group_fix"] == sorted(members) and other not in res["resolved_by_group_fix"]
        assert res["group_members_source"] == "session_cache" and gid == res["violation_group_id"]
        alone = api.resolve_violation({"violation_id": members[1], "session_id": session, "scope": "record_only"},
                                      model=object())
        assert "resolved_by_group_fix" not in alone
    finally:
        pins.CACHE.end_session(session)


def test_standard_provenance_block_has_every_key():
    from registry.provenance import stamp

    out = stamp({"x": 1}, {"a": 1, "render": "json"}, tool="t", engine_versions={"e": "1"})
    assert {"seed", "engine_versions", "inputs_hash", "outputs_hash", "revision_id"} <= set(out["provenance"])
    assert out["provenance"]["revision_id"] is None and out["provenance"]["inputs_hash"] == stamp(
        {"x": 1}, {"a": 1}, tool="t")["provenance"]["inputs_hash"]  # delivery fields are not inputs


@settings(max_examples=500, deadline=None)
@given(st.none() | st.booleans() | st.integers() | st.floats() | st.text())
def test_porcelain_leaves_are_written_as_compact_json(value):
    """The porcelain writes leaves without an encoder run each: the same text as the JSON encoder's."""
    assert render._scalar(value) == render._compact(value)


def test_telemetry_buffers_call_events_and_writes_faults_through(tmp_path, monkeypatch):
    """A small call pays no file I/O: call events reach the file within FLUSH_S or at close;
    a fault is written at once."""
    from coordinator.mcp import telemetry as tm

    monkeypatch.setattr(tm, "FLUSH_S", 60.0)  # no flush by the clock during the test
    path = tmp_path / "telemetry.jsonl"
    tel = tm.Telemetry(path=path)
    tel.lifecycle_to("ready")  # written through (and the flush clock starts)
    size = path.stat().st_size
    for _ in range(50):
        tel.call("query_region", ok=True, ms=1.0)
    assert path.stat().st_size == size  # still buffered
    assert tel.snapshot()["methods"]["query_region"]["calls"] == 50  # the counts are live
    tel.fault(Fault(FaultCategory.PROCESS, "worker exited"), tool="query_region", restarted=True)
    lines = path.read_text().splitlines()
    assert sum('"event":"call"' in x for x in lines) == 50 and '"event":"fault"' in lines[-1]
    tel.call("query_region", ok=True, ms=1.0)
    tel.close()
    assert sum('"event":"call"' in x for x in path.read_text().splitlines()) == 51
