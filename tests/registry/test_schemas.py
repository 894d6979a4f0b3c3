"""The schemas themselves: well-formed, resolvable, closed where they must be,
and they accept the documented examples and refuse what the spec forbids."""
from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from registry import schema_store
from registry.check import schema_refs
from registry.errors import SchemaValidationError
from tests.registry.examples import SHA, example, mutations

ARTIFACTS = ["tool_profile", "patch_proposal", "stack_plan", "apply_result", "validation_report",
             "promotion_decision", "scheduling_decision", "selection_decision", "conflict_decision"]
REQUIRED_SCHEMAS = ["common", "envelope", "control_event", "spawn_spec", "task_node", "work_queue",
                    "error_object", *ARTIFACTS]
CLOSED = ["spawn_spec", "task_node", "work_queue", "tool_profile"]
OPEN = ["envelope", "control_event", "error_object", *[a for a in ARTIFACTS if a != "tool_profile"]]
HEADER_FIELDS = ["artifact_kind", "version", "object_id", "run_id", "wave_id", "task_id", "node_id",
                 "base_ref", "base_tree_hash", "created_at", "producer", "subject", "determinism_seed",
                 "inputs_hash", "payload_digest", "canonicalization", "kid", "signature"]


def test_every_required_schema_exists() -> None:
    assert set(REQUIRED_SCHEMAS) <= set(schema_store.schema_names())


@pytest.mark.parametrize("name", schema_store.schema_names())
def test_schema_is_valid_draft_2020_12_with_id(name: str) -> None:
    schema = schema_store.load_schema(name)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == f"https://dome.dev/schemas/{name}.json"


@pytest.mark.parametrize("name", REQUIRED_SCHEMAS)
def test_contract_schema_has_a_description(name: str) -> None:
    assert schema_store.load_schema(name).get("description")


@pytest.mark.parametrize("name", schema_store.schema_names())
def test_every_ref_resolves(name: str) -> None:
    schema = schema_store.load_schema(name)
    resolver = schema_store._registry().resolver(base_uri=schema["$id"])
    for ref in schema_refs(schema):
        resolved = resolver.lookup(ref)
        assert isinstance(resolved.contents, dict), ref


@pytest.mark.parametrize("name", sorted(set(REQUIRED_SCHEMAS) - {"common"}))
def test_example_validates(name: str) -> None:
    schema_store.validate(name, example(name))


@pytest.mark.parametrize("name", CLOSED)
def test_request_like_schemas_are_closed(name: str) -> None:
    assert schema_store.load_schema(name)["additionalProperties"] is False
    bad = example(name)
    bad["surprise"] = 1
    with pytest.raises(SchemaValidationError) as info:
        schema_store.validate(name, bad)
    assert "remove fields the schema does not define" in info.value.hints


@pytest.mark.parametrize("name", OPEN)
def test_response_like_schemas_are_open(name: str) -> None:
    ok = example(name)
    ok["x_extension"] = {"anything": True}
    schema_store.validate(name, ok)


@pytest.mark.parametrize("name", ARTIFACTS)
def test_artifacts_carry_every_header_field(name: str) -> None:
    props = schema_store.load_schema(name)["properties"]
    missing = [f for f in HEADER_FIELDS if f not in props]
    assert not missing
    assert props["artifact_kind"]["const"] == f"dome.{name}/v1"


@pytest.mark.parametrize("name,fields", [
    ("spawn_spec", ["run_id", "wave_id", "node_id", "node_execution_id", "task_spec_ref",
                    "tool_profile_ref", "container_ref", "action_spec", "determinism_seed", "inputs_hash"]),
    ("tool_profile", ["profile_id", "contract_id", "issued_at", "expires_at", "jti", "audience", "run_id",
                      "wave_id", "single_use", "constraints", "budgets", "issuer"]),
    ("task_node", ["node_id", "containers", "required_capabilities", "required_outputs", "dependencies"]),
    ("patch_proposal", ["proposal_id", "base_ref", "base_tree_hash", "diff_canonicalization", "diff_digest",
                        "touched_files", "intent_tags", "risk", "declared_constraints", "worker_run_meta"]),
    ("stack_plan", ["stack_plan_id", "base_ref", "ordered_proposals", "rejected", "checkpoint_strategy",
                    "expected_validations", "determinism_seed"]),
    ("apply_result", ["applied", "conflict_summary", "proposal_id", "diff_digest", "base_ref", "head_ref"]),
    ("validation_report", ["included_proposals", "environment", "passed"]),
    ("promotion_decision", ["from_head_ref", "to_ref", "policy_version", "evidence_refs"]),
    ("scheduling_decision", ["tie_break_order", "selected", "wave_id", "determinism_seed"]),
    ("selection_decision", ["tie_break_order", "entries"]),
    ("conflict_decision", ["policy_precedence", "proposal_id", "conflict_fingerprint", "tie_break_order"]),
])
def test_spec_required_fields_are_refused_when_missing(name: str, fields: list[str]) -> None:
    for field in fields:
        bad = example(name)
        bad.pop(field, None)
        with pytest.raises(SchemaValidationError):
            schema_store.validate(name, bad)


@pytest.mark.parametrize("name,path,keys", [
    ("scheduling_decision", ("selected", 0, "tie_break"), ["node_priority_group", "node_id", "task_spec_digest"]),
    ("selection_decision", ("entries", 0), ["proposal_id", "created_at", "diff_digest"]),
    ("conflict_decision", (), ["policy_precedence", "proposal_id", "conflict_fingerprint"]),
])
def test_decisions_persist_tie_break_fields_in_spec_order(name: str, path: tuple, keys: list[str]) -> None:
    ex = example(name)
    assert ex["tie_break_order"][-3:] == keys
    ex["tie_break_order"] = list(reversed(ex["tie_break_order"]))
    with pytest.raises(SchemaValidationError):
        schema_store.validate(name, ex)
    for key in keys:
        bad = example(name)
        target = bad
        for step in path:
            target = target[step]
        del target[key]
        with pytest.raises(SchemaValidationError):
            schema_store.validate(name, bad)


@pytest.mark.parametrize("field,value", [
    ("task_spec_ref", "n1@main"), ("tool_profile_ref", "latest"), ("container_ref", "python:3.11"),
    ("container_ref", "host"), ("base_ref", "main"),
])
def test_spawn_spec_refuses_unpinned_refs(field: str, value: str) -> None:
    bad = example("spawn_spec")
    bad[field] = value
    with pytest.raises(SchemaValidationError):
        schema_store.validate("spawn_spec", bad)


def test_patch_proposal_base_must_be_a_commit_sha_and_carry_a_diff() -> None:
    bad = example("patch_proposal")
    bad["base_ref"] = "main"
    with pytest.raises(SchemaValidationError):
        schema_store.validate("patch_proposal", bad)
    bad = example("patch_proposal")
    del bad["diff_ref"]
    with pytest.raises(SchemaValidationError):
        schema_store.validate("patch_proposal", bad)
    bad["diff_unified"] = "diff --git a/a.txt b/a.txt\n"
    schema_store.validate("patch_proposal", bad)
    assert bad["base_ref"] == SHA


def test_signature_needs_kid_and_digest_needs_canonicalization() -> None:
    bad = example("stack_plan")
    del bad["kid"]
    with pytest.raises(SchemaValidationError):
        schema_store.validate("stack_plan", bad)
    bad = example("stack_plan")
    del bad["canonicalization"]
    with pytest.raises(SchemaValidationError):
        schema_store.validate("stack_plan", bad)


def test_tool_profile_needs_methods_or_capabilities() -> None:
    bad = example("tool_profile")
    del bad["allowed_methods"]
    with pytest.raises(SchemaValidationError):
        schema_store.validate("tool_profile", bad)
    bad["allowed_capabilities"] = ["write:patch"]
    schema_store.validate("tool_profile", bad)


def test_work_queue_validations_and_command_actions() -> None:
    wq = example("work_queue")
    wq["validations"][0].pop("argv")
    with pytest.raises(SchemaValidationError):
        schema_store.validate("work_queue", wq)
    wq = example("work_queue")
    wq["tasks"][0]["action_spec"] = {"intent": "command"}
    with pytest.raises(SchemaValidationError):
        schema_store.validate("work_queue", wq)
    wq = example("work_queue")
    wq["tasks"][1]["unknown"] = True
    with pytest.raises(SchemaValidationError) as info:
        schema_store.validate("work_queue", wq)
    assert any(e["path"] == "/tasks/1" for e in info.value.details["errors"])
    wq = example("work_queue")
    wq["tasks"][0]["cycle"] = {"group": "loop", "max_iterations": 3}
    wq["tasks"][0]["action_spec"] = {"intent": "litho.optimize", "params": {"tile": 1}}
    schema_store.validate("work_queue", wq)


def test_control_event_topic_is_open_with_documented_known_list() -> None:
    schema = schema_store.load_schema("control_event")
    known = schema["x-dome-known-topics"]
    for topic in ["run.started", "run.finished", "wave.started", "task.dispatched", "task.progress",
                  "task.completed", "task.ack", "task.timeout", "gate.computed", "promotion.computed"]:
        assert topic in known
    ev = example("control_event")
    ev["topic"] = "custom.thing.happened"
    schema_store.validate("control_event", ev)
    ev["topic"] = "NotATopic"
    with pytest.raises(SchemaValidationError):
        schema_store.validate("control_event", ev)


def test_load_schema_returns_a_copy_callers_cannot_corrupt() -> None:
    first = schema_store.load_schema("spawn_spec")
    first["additionalProperties"] = True
    first["required"].clear()
    bad = example("spawn_spec")
    bad["surprise"] = 1
    with pytest.raises(SchemaValidationError):
        schema_store.validate("spawn_spec", bad)
    assert schema_store.load_schema("spawn_spec")["additionalProperties"] is False


@pytest.mark.parametrize("name", ["../schemas/spawn_spec", "/etc/passwd", "spawn_spec.json", "", "nope",
                                  "klayout/../spawn_spec"])
def test_unknown_or_escaping_schema_names_are_not_found(name: str) -> None:
    with pytest.raises(SchemaValidationError) as info:
        schema_store.load_schema(name)
    assert info.value.code == "SCHEMA_NOT_FOUND"


def test_every_error_is_reported_with_path_and_a_useful_message() -> None:
    bad = example("work_queue")
    del bad["repo"]
    bad["tasks"][0]["node_id"] = "bad id with spaces"
    bad["tasks"][1]["extra"] = 1
    bad["validations"][0]["suite"] = 5
    with pytest.raises(SchemaValidationError) as info:
        schema_store.validate("work_queue", bad)
    paths = [e["path"] for e in info.value.details["errors"]]
    assert "/" in paths and "/tasks/0/node_id" in paths and "/tasks/1" in paths
    assert "/validations/0/suite" in paths
    spawn = example("spawn_spec")
    del spawn["gateway"]["socket"]
    with pytest.raises(SchemaValidationError) as info:
        schema_store.validate("spawn_spec", spawn)
    msg = info.value.details["errors"][0]["message"]
    assert "required" in msg  # names the branch's missing property, not only "anyOf failed"


@pytest.mark.parametrize("name", sorted(set(REQUIRED_SCHEMAS) - {"common"}))
def test_bundled_validator_agrees_with_reference_resolution(name: str) -> None:
    """validator() inlines every $ref for speed; verdicts and error paths must
    equal those of a plain validator that resolves refs through the registry."""
    plain = Draft202012Validator(schema_store.load_schema(name), registry=schema_store._registry())
    fast = schema_store.validator(name)
    assert "$ref" not in json.dumps(fast.schema)
    for label, data in mutations(example(name)):
        if "+=" in label:
            continue  # string suffixes: ECMA pattern semantics differ from stock jsonschema on purpose
        want = sorted("/".join(map(str, e.absolute_path)) for e in plain.iter_errors(data))
        got = sorted("/".join(map(str, e.absolute_path)) for e in fast.iter_errors(data))
        assert got == want, label


@pytest.mark.parametrize("name", [n for n in schema_store.schema_names() if "/" in n])
def test_area_schemas_bundle_without_dangling_refs(name: str) -> None:
    v = schema_store.validator(name)
    Draft202012Validator.check_schema(v.schema)


@given(st.datetimes(min_value=datetime.datetime(1970, 1, 1), timezones=st.just(datetime.timezone.utc)))
def test_every_utc_instant_written_as_dome_writes_it_is_a_timestamp(dt: datetime.datetime) -> None:
    import re
    pattern = re.compile(schema_store.load_schema("common")["$defs"]["timestamp"]["pattern"])
    assert pattern.match(dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
    assert pattern.match(dt.isoformat())
    assert pattern.match(dt.strftime("%Y-%m-%dT%H:%M:%SZ"))


@pytest.mark.parametrize("bad", ["2026-13-01T00:00:00Z", "2026-00-10T00:00:00Z", "2026-01-32T00:00:00Z",
                                 "2026-01-01T24:00:00Z", "2026-01-01T10:60:00Z", "2026-01-01T10:00:61Z",
                                 "2026-01-01 10:00:00Z", "2026-01-01T10:00:00", "2026-01-01T10:00:00+2:00",
                                 "2026-01-01T10:00:00.Z", "٢٠٢٦-01-01T10:00:00Z"])
def test_malformed_timestamps_are_refused(bad: str) -> None:
    ev = example("control_event")
    ev["ts"] = bad
    with pytest.raises(SchemaValidationError):
        schema_store.validate("control_event", ev)


def _tool_schema_files() -> list[tuple[str, dict]]:
    root = schema_store.SCHEMA_DIR.parent
    out = [(n, schema_store.load_schema(n)) for n in schema_store.schema_names()]
    out += [(str(p.relative_to(root)), json.loads(p.read_text()))
            for p in sorted(root.glob("tools/*/spec/schemas/*.json"))]
    return out


def test_every_tool_request_schema_is_closed_and_every_response_open() -> None:
    """House rule (DESIGN.md, MCP front door): requests refuse unknown fields,
    responses accept them, in every area's schemas."""
    import re
    closed_wrong, open_wrong = [], []
    for name, schema in _tool_schema_files():
        stem = name.rsplit("/", 1)[-1].removesuffix(".json")
        if re.search(r"[._]request$", stem):
            if schema.get("additionalProperties") is not False and schema.get("unevaluatedProperties") is not False:
                closed_wrong.append(name)
        elif re.search(r"[._]response$", stem):
            if schema.get("additionalProperties") is False or schema.get("unevaluatedProperties") is False:
                open_wrong.append(name)
    assert not closed_wrong, f"request schemas that accept unknown fields: {closed_wrong}"
    assert not open_wrong, f"response schemas that refuse unknown fields: {open_wrong}"


def test_patterns_end_at_the_end_of_the_string_as_in_ecma_262() -> None:
    """Python's `$` also matches before a final newline; JSON Schema's (ECMA) does not."""
    ev = example("spawn_spec")
    for field in ("run_id", "base_ref", "inputs_hash", "container_ref"):
        bad = example("spawn_spec")
        bad[field] = ev[field] + "\n"
        with pytest.raises(SchemaValidationError):
            schema_store.validate("spawn_spec", bad)
    assert schema_store.ecma_regex(r"^[$]+$").search("$$")
    assert schema_store.ecma_regex(r"^a\$$").search("a$")
    assert not schema_store.ecma_regex(r"^[0-9]+$").search("12\n")
    assert not schema_store.ecma_regex(r"^\d+$").search("\u0661\u0662")


