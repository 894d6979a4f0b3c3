"""The small checker compiles each schema to Python source; its verdicts must be jsonschema's
for every keyword it accepts, alone and combined, not only on dome's own schemas.

Random schemas are drawn from every keyword schema_lite implements (nested through
properties, items, anyOf/allOf/oneOf/not, if/then/else, patternProperties, $defs with $ref,
recursive ones included) and random instances are checked by both; a schema's verdicts are
also held equal on instances built to sit at its bounds."""
from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry import schema_lite
from registry.schema_store import inline_validator
from tests.registry.test_schema_lite import values

NAMES = ["a", "b", "c", "zz", "é", "a b"]
TYPES = ["object", "array", "string", "number", "integer", "boolean", "null"]
PATTERNS = ["^a", "b$", "^[0-9a-f]{2,4}$", "x", "^sha256:[0-9a-f]{3}$", ".", "^$"]
small = st.integers(-3, 5)
bounds = st.one_of(small, st.sampled_from([0.5, -1.5, 2.0, 1e20]))


def leaf_keyword() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.builds(lambda t: {"type": t}, st.sampled_from(TYPES)),
        st.builds(lambda ts: {"type": ts}, st.lists(st.sampled_from(TYPES), min_size=1, max_size=3, unique=True)),
        st.builds(lambda v: {"const": v}, values),
        st.builds(lambda vs: {"enum": vs}, st.lists(values, min_size=1, max_size=4)),
        st.builds(lambda vs: {"enum": vs}, st.lists(st.sampled_from(NAMES), min_size=1, max_size=4)),
        st.builds(lambda ns: {"required": ns}, st.lists(st.sampled_from(NAMES), max_size=3, unique=True)),
        st.builds(lambda k, n: {k: n}, st.sampled_from(["minItems", "maxItems", "minLength", "maxLength",
                                                        "minProperties", "maxProperties"]), st.integers(0, 3)),
        st.builds(lambda p: {"pattern": p}, st.sampled_from(PATTERNS)),
        st.builds(lambda k, n: {k: n}, st.sampled_from(["minimum", "maximum", "exclusiveMinimum",
                                                        "exclusiveMaximum"]), bounds),
        st.builds(lambda u: {"uniqueItems": u}, st.booleans()),
        st.builds(lambda n: {"multipleOf": n}, st.sampled_from([1, 2, 3, 0.5, 0.1])),
        st.builds(lambda d: {"dependentRequired": d},
                  st.dictionaries(st.sampled_from(NAMES), st.lists(st.sampled_from(NAMES), max_size=2, unique=True),
                                  max_size=2)),
        st.just({}), st.just({"title": "t", "description": "d", "x-note": 1}),
    )


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in parts:
        out.update(p)
    return out


def schemas() -> st.SearchStrategy[Any]:
    leaf = st.one_of(st.booleans(), st.lists(leaf_keyword(), min_size=1, max_size=3).map(_merge))

    def extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(
            st.builds(lambda p, add: {"type": "object", "properties": p, **add},
                      st.dictionaries(st.sampled_from(NAMES), inner, max_size=3),
                      st.one_of(st.just({}), st.builds(lambda a: {"additionalProperties": a}, inner))),
            st.builds(lambda pp, a: {"patternProperties": pp, "additionalProperties": a},
                      st.dictionaries(st.sampled_from(PATTERNS), inner, max_size=2), inner),
            st.builds(lambda i: {"items": i}, inner),
            # a $ref only where the instance is descended into, so every cycle ends
            st.builds(lambda n, to: {"properties": {n: {"$ref": to}}}, st.sampled_from(NAMES),
                      st.sampled_from(["#/$defs/node", "#"])),
            st.sampled_from([{"items": {"$ref": "#/$defs/node"}}, {"items": {"$ref": "#"}}]),
            st.builds(lambda k, subs: {k: subs}, st.sampled_from(["anyOf", "allOf", "oneOf"]),
                      st.lists(inner, min_size=1, max_size=3)),
            st.builds(lambda s: {"not": s}, inner),
            st.builds(lambda c, t, e: {"if": c, "then": t, "else": e}, inner, inner, inner),
            st.builds(lambda c, t: {"if": c, "then": t}, inner, inner),
            st.builds(lambda s: {"propertyNames": s}, inner),
            st.builds(lambda s: {"contains": s}, inner),
            st.builds(lambda a, b: {**a, **b} if isinstance(a, dict) and isinstance(b, dict) else a, inner, inner),
        )
    node = st.recursive(leaf, extend, max_leaves=8)
    # the root names a $defs/node every "$ref" above points at: recursion through the root's own defs
    return st.builds(lambda root, d: ({**root, "$defs": {"node": d}} if isinstance(root, dict) else root),
                     node, node)


instances = st.recursive(
    st.none() | st.booleans() | st.integers(-4, 6) | st.sampled_from([0.5, 2.0, -1.5, 1e20, 0.1, 0.3])
    | st.sampled_from(NAMES + ["", "ab", "0a1f", "sha256:abc", "b", "xx\n"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(NAMES), inner, max_size=4),
    max_leaves=10)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(schema=schemas(), data=st.data())
def test_compiled_checker_gives_jsonschemas_verdict_on_random_schemas(schema: Any, data: Any) -> None:
    check = schema_lite.compile_schema(copy.deepcopy(schema))
    reference = inline_validator(schema)
    for _ in range(6):
        inst = data.draw(instances)
        assert check(copy.deepcopy(inst)) is reference.is_valid(inst), (schema, inst)


def test_a_recursive_schema_checks_to_any_depth() -> None:
    tree = {"type": "object", "required": ["v"], "additionalProperties": False,
            "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#"}}}}
    check = schema_lite.compile_schema(tree)
    doc: dict[str, Any] = {"v": 0}
    for i in range(1, 50):
        doc = {"v": i, "kids": [doc, {"v": -i}]}
    assert check(doc)
    doc["kids"][0]["kids"][0]["kids"][1]["v"] = "no"
    assert not check(doc)


@pytest.mark.parametrize("name", ["it's", 'say "x"', "back\\slash", "new\nline", "{x}"])
def test_property_names_that_look_like_code_are_only_names(name: str) -> None:
    """Names reach the generated source as string literals: quotes, backslashes and braces
    in them check like any other name, and never run."""
    schema = {"type": "object", "required": [name], "additionalProperties": False,
              "properties": {name: {"const": name}}, "dependentRequired": {name: [name]}}
    check = schema_lite.compile_schema(schema)
    assert check({name: name})
    assert not check({name: "other"})
    assert not check({})
    assert not check({name: name, "extra": 1})


def test_an_unsupported_keyword_deep_inside_is_still_refused() -> None:
    with pytest.raises(schema_lite.Unsupported):
        schema_lite.compile_schema({"properties": {"a": {"items": {"unevaluatedItems": False}}}})
    with pytest.raises(schema_lite.Unsupported):
        schema_lite.compile_schema({"type": "decimal"})


SIZED = {"minItems": lambda n: ["x"] * n, "maxItems": lambda n: ["x"] * n,
         "minLength": lambda n: "x" * n, "maxLength": lambda n: "x" * n,
         "minProperties": lambda n: {f"k{i}": i for i in range(n)},
         "maxProperties": lambda n: {f"k{i}": i for i in range(n)}}


@pytest.mark.parametrize("keyword", sorted(SIZED))
def test_size_bounds_agree_at_below_and_above_the_bound(keyword: str) -> None:
    for bound in range(0, 4):
        schema = {keyword: bound}
        check, reference = schema_lite.compile_schema(schema), inline_validator(schema)
        for n in (bound - 1, bound, bound + 1):
            if n >= 0:
                inst = SIZED[keyword](n)
                assert check(inst) is reference.is_valid(inst), (schema, inst)
        for other in (None, 3, 2.5, True, "xx", ["x"], {"a": 1}):
            assert check(other) is reference.is_valid(other), (schema, other)


@pytest.mark.parametrize("keyword", ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"])
def test_number_bounds_agree_at_below_and_above_the_bound(keyword: str) -> None:
    for bound in (-2, 0, 1, 2, 0.5, 1.5, 3.0):
        if keyword == "multipleOf" and bound <= 0:
            continue
        schema = {keyword: bound}
        check, reference = schema_lite.compile_schema(schema), inline_validator(schema)
        for inst in (bound - 1, bound - 0.5, bound, float(bound), bound + 0.5, bound + 1, 2 * bound, True, "1", None):
            assert check(inst) is reference.is_valid(inst), (schema, inst)


@pytest.mark.parametrize("schema", [
    {"oneOf": [{"type": "integer"}, {"minimum": 0}]}, {"anyOf": [{"type": "integer"}, {"minimum": 0}]},
    {"allOf": [{"type": "integer"}, {"minimum": 0}]}, {"not": {"oneOf": [{"type": "integer"}, {"minimum": 0}]}},
    {"if": {"type": "integer"}, "then": {"minimum": 0}, "else": {"type": "string"}},
    {"oneOf": [{"type": "number"}, {"type": "integer"}, {"const": 2}]}])
def test_combinators_agree_where_branches_overlap(schema: dict[str, Any]) -> None:
    check, reference = schema_lite.compile_schema(schema), inline_validator(schema)
    for inst in (-2, -1.5, 0, 2, 2.0, 2.5, "s", None, True, [], {}):
        assert check(inst) is reference.is_valid(inst), (schema, inst)
