"""The small start-up checker (registry.schema_lite) gives the full validator's verdict.

The worker passes a SpawnSpec with it, so a spec it wrongly passed would reach the
worker unchecked: its verdict must equal jsonschema's on valid specs and on every
kind of broken one (missing, unknown, mistyped, out-of-range, near-miss patterns)."""
from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry import schema_lite, schema_store
from tests.registry.examples import EXAMPLES, example, mutations

HEX = "0123456789abcdef"


def good_spec() -> dict[str, Any]:
    return {
        "artifact_kind": "dome.spawn_spec/v1", "version": "1.0.0", "run_id": "run-1", "wave_id": "w-1",
        "node_id": "a", "node_execution_id": "ne-0123456789abcdef", "task_id": "a",
        "task_spec_ref": "sha256:" + "1" * 64, "tool_profile_ref": "sha256:" + "2" * 64,
        "container_ref": "host@sha256:" + "3" * 64,
        "action_spec": {"intent": "command", "argv": ["sh", "-c", "true"], "env": {"A": "b"}},
        "determinism_seed": 7, "inputs_hash": "sha256:" + "4" * 64, "base_ref": "a" * 40,
        "base_tree_hash": "b" * 40, "attempt": 1, "created_at": "2026-11-26T00:00:00Z",
        "gateway": {"socket": "/dome/gateway.sock"},
        "grant": {"payloadType": "application/vnd.dome.toolprofile+json", "payload": "e30=",
                  "signatures": [{"keyid": "k", "sig": "c2ln"}]},
        "timeout_s": 60,
    }


def full_verdict(spec: Any) -> bool:
    return not list(schema_store.iter_errors("spawn_spec", spec))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**60, 2**60) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6)
# strings near the patterns: digests, shas, ids, refs, with a stray character or a newline now and then
near_strings = st.one_of(
    st.builds(lambda n, tail: "sha256:" + "a" * n + tail, st.integers(60, 66), st.sampled_from(["", "\n", "G", " "])),
    st.builds(lambda n, tail: "f" * n + tail, st.sampled_from([39, 40, 41, 63, 64, 65]), st.sampled_from(["", "\n"])),
    st.builds(lambda name, n: f"{name}@sha256:" + "0" * n, st.sampled_from(["img", "host", "a b", "", "x@y"]),
              st.sampled_from([63, 64])),
    st.from_regex(r"[A-Za-z0-9._:@/+\- \n]{0,12}", fullmatch=True),
    st.sampled_from(["1.0.0", "1.0", "1.0.0\n", "command", "Command", "litho.optimize", "a..b",
                     "2026-11-26T00:00:00Z", "2026-13-26T00:00:00Z", "2026-11-26 00:00:00Z"]))
values = st.one_of(json_values, near_strings, st.integers(-3, 3), st.sampled_from([0, 0.0, 0.5, 1.0, 2**53, -1, True]))
PATHS = [(k,) for k in good_spec()] + [("action_spec", k) for k in ("intent", "argv", "env", "params", "extra")] + \
    [("gateway", k) for k in ("socket", "url", "port")] + \
    [("grant", k) for k in ("payloadType", "payload", "signatures", "extra")] + \
    [("grant", "signatures", 0), ("action_spec", "argv", 0), ("action_spec", "env", "A"), ("unknown_field",)]


@st.composite
def mutated(draw) -> dict[str, Any]:
    spec = good_spec()
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        node: Any = spec
        for p in path[:-1]:
            if isinstance(node, dict) and p in node:
                node = node[p]
            elif isinstance(node, list) and isinstance(p, int) and p < len(node):
                node = node[p]
            else:
                node = None
                break
        if node is None or not isinstance(node, (dict, list)):
            continue
        last = path[-1]
        if isinstance(node, list):
            if isinstance(last, int) and last < len(node):
                node[last] = draw(values)
        elif draw(st.booleans()) and last in node:
            del node[last]
        else:
            node[last] = draw(values)
    return spec


def test_the_good_spec_passes_both() -> None:
    assert full_verdict(good_spec()) and schema_lite.is_valid("spawn_spec", good_spec())


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_the_small_checker_agrees_with_jsonschema_on_spawn_specs(spec: dict[str, Any]) -> None:
    assert schema_lite.is_valid("spawn_spec", copy.deepcopy(spec)) == full_verdict(spec), spec


@pytest.mark.parametrize("name", schema_store.schema_names())
def test_every_schema_compiles_or_is_refused_as_unsupported(name: str) -> None:
    """A schema with a keyword the checker lacks raises Unsupported (the caller then uses jsonschema);
    none fails in any other way."""
    try:
        schema_lite._compiled(name)
    except schema_lite.Unsupported:
        pass


def test_an_unknown_keyword_is_refused_not_ignored() -> None:
    doc = {"$id": "https://dome.dev/schemas/x.json", "type": "array", "prefixItems": [{"type": "string"}]}
    with pytest.raises(schema_lite.Unsupported):
        schema_lite._Compiler().compile(doc, doc["$id"])


def _compiles(name: str) -> bool:
    try:
        schema_lite._compiled(name)
    except schema_lite.Unsupported:
        return False
    return True


def test_the_spawn_spec_and_most_schemas_compile() -> None:
    assert _compiles("spawn_spec")
    assert sum(map(_compiles, EXAMPLES)) >= len(EXAMPLES) - 2


@pytest.mark.parametrize("name", sorted(n for n in EXAMPLES if _compiles(n)))
def test_the_small_checker_agrees_on_every_single_field_mutation_of_each_example(name: str) -> None:
    """Beyond the SpawnSpec: every schema with an example that the checker compiles gets the same
    verdict from both validators on the example and on each of its single-field mutations."""
    cases = [("example", example(name)), *mutations(example(name))]
    wrong = [label for label, inst in cases
             if schema_lite.is_valid(name, inst) != (not list(schema_store.iter_errors(name, inst)))]
    assert wrong == [], wrong[:10]
