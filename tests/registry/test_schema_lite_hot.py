"""The coordinator's hot-path schema checks (registry.schema_lite.validate, InputSchema's fast
path) give jsonschema's verdicts, and refuse with the same error.

Each grant's ToolProfile, each SpawnSpec, each submitted PatchProposal and each gateway call's
arguments are passed by the small checker; only a document it fails reaches jsonschema, which
names the problems. A document the small checker wrongly passed would skip a check, so the
verdicts are held equal on random multi-field mutations of real examples, and a refusal must
be the very SchemaValidationError the full validator raises."""
from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.gateway.worker_tools import TOOLS
from coordinator.toolcore import InputSchema, ToolInputError
from registry import schema_lite, schema_store
from registry.errors import SchemaValidationError
from tests.registry.examples import MUTANTS, _paths, example
from tests.registry.test_schema_lite import values

# a drawn {} or [] of MUTANTS is copied: the shared one must never be mutated by a later draw
fresh = (values | st.sampled_from(MUTANTS)).map(copy.deepcopy)

HOT = ("tool_profile", "patch_proposal", "spawn_spec")


def _good(name: str) -> dict[str, Any]:
    if name == "spawn_spec":
        from tests.registry.test_schema_lite import good_spec
        return good_spec()
    return example(name)


@st.composite
def mutated(draw: Any, name: str) -> dict[str, Any]:
    """An example with one to three fields changed, dropped or added, anywhere in it."""
    doc = _good(name)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc)]
        path = draw(st.sampled_from(paths))
        node: Any = doc
        for step in path:
            node = node[step]
        keys = list(node)
        choice = draw(st.integers(0, 2))
        if choice == 0 and keys:
            del node[draw(st.sampled_from(keys))]
        elif choice == 1 and keys:
            node[draw(st.sampled_from(keys))] = draw(fresh)
        else:
            node[draw(st.sampled_from(["zz", *keys]))] = draw(fresh)
    return doc


def full_verdict(name: str, doc: Any) -> bool:
    return not list(schema_store.iter_errors(name, doc))


@pytest.mark.parametrize("name", HOT)
def test_every_hot_path_schema_compiles(name: str) -> None:
    assert schema_lite.is_valid(name, _good(name)) and full_verdict(name, _good(name))


@pytest.mark.parametrize("name", HOT)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_small_checker_agrees_on_mutated_hot_documents(name: str, data: Any) -> None:
    doc = data.draw(mutated(name))
    assert schema_lite.is_valid(name, copy.deepcopy(doc)) == full_verdict(name, doc), doc


@pytest.mark.parametrize("name", HOT)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_refusal_is_the_full_validators_error(name: str, data: Any) -> None:
    doc = data.draw(mutated(name))
    try:
        schema_store.validate(name, copy.deepcopy(doc))
        expected = None
    except SchemaValidationError as exc:
        expected = exc.to_object()
    try:
        schema_lite.validate(name, doc)
        got = None
    except SchemaValidationError as exc:
        got = exc.to_object()
    assert got == expected


def _args(name: str) -> dict[str, Any]:
    good = {"idempotency_key": "ne-1:x:1", "node_execution_id": "ne-1", "fraction": 0.5, "message": "m",
            "media_type": "text/x-diff", "content_b64": "eA==", "name": "patch.diff",
            "expected_digest": "sha256:" + "a" * 64, "proposal": {"proposal_id": "p"}, "outcome": "succeeded",
            "summary": {}, "metrics": {}, "evidence": [{}], "proposal_id": None, "error": None}
    schema = next(t[2] for t in TOOLS if t[0] == name)
    return {k: v for k, v in good.items() if k in schema["properties"]}


@pytest.mark.parametrize("tool", [t[0] for t in TOOLS])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_gateway_tools_fast_check_agrees_with_jsonschema(tool: str, data: Any) -> None:
    """InputSchema passes arguments with the small checker; it must pass exactly what jsonschema passes."""
    schema = InputSchema(tool, next(t[2] for t in TOOLS if t[0] == tool))
    assert schema.passes is not schema.validator.is_valid  # the fast path is in use
    args = _args(tool)
    for _ in range(data.draw(st.integers(0, 3))):
        key = data.draw(st.sampled_from(sorted(schema.fields)))
        if data.draw(st.booleans()) and key in args:
            del args[key]
        else:
            args[key] = data.draw(fresh)
    assert schema.passes(copy.deepcopy(args)) == schema.validator.is_valid(args), args
    if not schema.validator.is_valid(args):
        with pytest.raises(ToolInputError):
            schema.validate(args)
