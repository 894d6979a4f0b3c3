"""Python models and JSON Schemas must say the same thing.

For every (model, schema part) pair in registry.models.MODEL_SCHEMAS:
property names, required sets, closedness, JSON types, patterns, enums,
array item types and uniqueness agree; the examples round-trip through both;
and a few thousand single-field mutations of the examples get the same
verdict from the model as from the schema.
"""
from __future__ import annotations

import copy
import json
from typing import Any, Callable, Iterator

import pytest
from pydantic import ValidationError

from registry import schema_store
from registry.errors import SchemaValidationError
from registry.models import MODEL_SCHEMAS, SCHEMA_MODELS, DomeModel, model_for
from tests.registry.examples import EXAMPLES, example

Resolve = Callable[[str], dict[str, Any]]
PAIRS = sorted(MODEL_SCHEMAS.items(), key=lambda kv: kv[1])
IDS = [f"{m.__name__}={s}" for m, s in PAIRS]


def _schema_part(target: str) -> tuple[dict[str, Any], Resolve]:
    name, _, pointer = target.partition("#")
    root = schema_store.load_schema(name)
    node: Any = root
    for step in [p for p in pointer.split("/") if p]:
        node = node[int(step)] if isinstance(node, list) else node[step]
    resolver = schema_store._registry().resolver(base_uri=root["$id"])
    return node, lambda ref: resolver.lookup(ref).contents


def _model_part(model: type[DomeModel]) -> tuple[dict[str, Any], Resolve]:
    root = model.model_json_schema(mode="validation", by_alias=True)

    def resolve(ref: str) -> dict[str, Any]:
        assert ref.startswith("#/$defs/"), ref
        return root["$defs"][ref.removeprefix("#/$defs/")]

    return root, resolve


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _deref(node: dict[str, Any], resolve: Resolve) -> dict[str, Any]:
    while "$ref" in node:
        node = resolve(node["$ref"])
    return node


def _branches(node: dict[str, Any], resolve: Resolve) -> list[dict[str, Any]]:
    node = _deref(node, resolve)
    alts = node.get("anyOf") or node.get("oneOf")
    if alts and "type" not in node:
        return [b for alt in alts for b in _branches(alt, resolve)]
    return [node]


def _types(node: dict[str, Any]) -> set[str]:
    if "type" in node:
        t = node["type"]
        return set(t) if isinstance(t, list) else {t}
    if "const" in node:
        return {_json_type(node["const"])}
    if "enum" in node:
        return {_json_type(v) for v in node["enum"]}
    return {"any"}


def facets(node: dict[str, Any], resolve: Resolve, *, drop_null: bool = False) -> dict[str, Any]:
    """What a property allows, reduced to comparable facts."""
    branches = _branches(node, resolve)
    types: set[str] = set()
    for b in branches:
        types |= _types(b)
    if drop_null:
        types.discard("null")
    real = [b for b in branches if _types(b) != {"null"}]
    out: dict[str, Any] = {"types": sorted(types)}
    for b in real:
        if "pattern" in b:
            out["pattern"] = b["pattern"]
        if "const" in b:
            out["values"] = sorted([json.dumps(b["const"], sort_keys=True)])
        elif "enum" in b:
            out["values"] = sorted(json.dumps(v, sort_keys=True) for v in b["enum"])
        if b.get("uniqueItems"):
            out["unique"] = True
        if "items" in b:
            out["items"] = facets(b["items"], resolve)
        if isinstance(b.get("additionalProperties"), dict):
            out["values_of"] = facets(b["additionalProperties"], resolve)
    return out


@pytest.mark.parametrize("model,target", PAIRS, ids=IDS)
def test_model_matches_schema(model: type[DomeModel], target: str) -> None:
    s_node, s_resolve = _schema_part(target)
    s_node = _deref(s_node, s_resolve)
    m_node, m_resolve = _model_part(model)

    s_props, m_props = s_node.get("properties", {}), m_node.get("properties", {})
    assert sorted(m_props) == sorted(s_props), "property names differ"
    assert set(m_node.get("required", [])) == set(s_node.get("required", [])), "required sets differ"
    closed_schema = s_node.get("additionalProperties") is False
    assert (model.model_config.get("extra") == "forbid") == closed_schema, "closedness differs"
    for name in s_props:
        nullable = name in model.nullable
        got = facets(m_props[name], m_resolve, drop_null=not nullable)
        want = facets(s_props[name], s_resolve)
        assert got == want, f"{target}.{name}: model {got} != schema {want}"


def test_every_contract_schema_has_a_model() -> None:
    names = [n for n in schema_store.schema_names() if "/" not in n and n != "common"]
    assert sorted(SCHEMA_MODELS) == sorted(names)


def test_every_nested_model_is_registered() -> None:
    registered = {m.__name__ for m in MODEL_SCHEMAS}
    for model in MODEL_SCHEMAS:
        nested = set(model.model_json_schema().get("$defs", {}))
        assert nested <= registered, f"{model.__name__} nests unregistered {nested - registered}"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_examples_round_trip_through_model_and_schema(name: str) -> None:
    data = example(name)
    schema_store.validate(name, data)
    obj = model_for(name).model_validate(data)
    out = obj.to_json_obj()
    assert out == data
    schema_store.validate(name, out)
    assert model_for(name).model_validate(out) == obj


def test_models_built_in_code_serialize_to_schema_valid_json() -> None:
    from registry.models import ActionSpec, TaskNode

    with pytest.raises(ValidationError):
        TaskNode(node_id="n9", containers=[], required_capabilities=["read"], required_outputs=[],
                 dependencies=[], action_spec=ActionSpec(intent="command", argv=["true"]), risk=None)
    node = TaskNode.make(node_id="n9", containers=[], required_capabilities=["read"], required_outputs=[],
                    dependencies=[], action_spec=ActionSpec(intent="command", argv=["true"]),
                    risk=None)
    out = node.to_json_obj()
    assert "risk" not in out
    schema_store.validate("task_node", out)


# ---- differential mutations: the model and the schema must agree on every verdict

MUTANTS: list[Any] = [None, 12345, 1.5, "x", True, [], {}, "sha256:" + "0" * 64]


def _paths(node: Any, path: tuple = ()) -> Iterator[tuple]:
    if isinstance(node, dict):
        yield path
        for k, v in node.items():
            yield from _paths(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, path + (i,))


def _mutations(data: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for path in list(_paths(data)):
        parent = data
        for step in path:
            parent = parent[step]
        extra = copy.deepcopy(data)
        target = extra
        for step in path:
            target = target[step]
        target["zz_unknown"] = 1
        yield f"{path}+zz_unknown", extra
        for key in list(parent):
            dropped = copy.deepcopy(data)
            target = dropped
            for step in path:
                target = target[step]
            del target[key]
            yield f"{path}-{key}", dropped
            if isinstance(parent[key], str):
                for suffix in ("\n", "\u0661", " "):
                    changed = copy.deepcopy(data)
                    target = changed
                    for step in path:
                        target = target[step]
                    target[key] = target[key] + suffix
                    yield f"{path}.{key}+={suffix!r}", changed
            for value in MUTANTS:
                changed = copy.deepcopy(data)
                target = changed
                for step in path:
                    target = target[step]
                target[key] = copy.deepcopy(value)
                yield f"{path}.{key}={value!r}", changed


def _schema_ok(name: str, data: Any) -> bool:
    try:
        schema_store.validate(name, data)
        return True
    except SchemaValidationError:
        return False


def _model_ok(name: str, data: Any) -> bool:
    try:
        model_for(name).model_validate(data)
        return True
    except ValidationError:
        return False


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_model_and_schema_agree_on_mutated_examples(name: str) -> None:
    disagreements = []
    count = 0
    for label, data in _mutations(example(name)):
        count += 1
        s, m = _schema_ok(name, data), _model_ok(name, data)
        if s != m:
            disagreements.append(f"{label}: schema={'ok' if s else 'refused'} model={'ok' if m else 'refused'}")
    assert count > 20
    assert not disagreements, "\n".join(disagreements[:40])
