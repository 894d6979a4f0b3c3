"""Load and validate against dome's JSON Schemas (draft 2020-12).

Schemas live in registry/schemas/<name>.json (and subfolders, named
"<folder>/<name>"). Each has "$id" "https://dome.dev/schemas/<name>.json" so
cross-file "$ref"s resolve through one registry. Validators are compiled once
and cached: validation sits on hot paths (every gateway call).
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Iterator

from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.exceptions import best_match
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from .errors import SchemaValidationError
from .schema_files import ID_PREFIX, SCHEMA_DIR, _load, ecma_regex, load_schema, schema_names

__all__ = ["ID_PREFIX", "SCHEMA_DIR", "ecma_regex", "iter_errors", "load_schema", "schema_names", "validate",
           "validator", "inline_validator"]


@lru_cache(maxsize=1)
def _registry() -> Registry:
    resources = []
    for name in schema_names():
        schema = _load(name)
        resources.append((schema.get("$id", ID_PREFIX + name + ".json"),
                          Resource.from_contents(schema, default_specification=DRAFT202012)))
    return Registry().with_resources(resources)


_MAX_INLINE_DEPTH = 32


def _inline_refs(node: Any, resolver: Any, depth: int = 0) -> Any:
    """A copy of `node` with every $ref replaced by what it points to.

    Each reference is resolved against the document it appears in, so a
    relative ref inside common.json still means common.json once inlined.
    Validation then never looks anything up, which is most of its cost.
    A ref deeper than _MAX_INLINE_DEPTH (a recursive schema) is left as a
    $ref for the validator to resolve through the registry (made absolute)."""
    if isinstance(node, list):
        return [_inline_refs(v, resolver, depth) for v in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        resolved = resolver.lookup(ref)
        siblings = {k: _inline_refs(v, resolver, depth) for k, v in node.items() if k != "$ref"}
        if depth >= _MAX_INLINE_DEPTH:
            absolute = resolved.resolver._base_uri + ("#" + ref.split("#", 1)[1] if "#" in ref else "")
            return {"$ref": absolute, **siblings}
        target = _inline_refs(resolved.contents, resolved.resolver, depth + 1)
        if isinstance(target, dict):
            target = {k: v for k, v in target.items() if k not in ("$id", "$schema", "$defs")}
            if not set(target) & set(siblings):
                return {**target, **siblings}
        return {"allOf": [target], **siblings}
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k in ("properties", "patternProperties", "$defs", "dependentSchemas") and isinstance(v, dict):
            # keys here are names, not keywords
            out[k] = {name: _inline_refs(sub, resolver, depth) for name, sub in v.items()}
        elif k in ("const", "enum", "default", "examples") or k.startswith("x-"):
            out[k] = v  # data, not schemas
        else:
            out[k] = _inline_refs(v, resolver, depth)
    return out


_compiled_patterns: dict[str, re.Pattern[str]] = {}


def _pattern_keyword(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    compiled = _compiled_patterns.get(pattern)
    if compiled is None:
        compiled = _compiled_patterns[pattern] = ecma_regex(pattern)
    if not compiled.search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_Validator = validators.extend(Draft202012Validator, {"pattern": _pattern_keyword})


def inline_validator(schema: dict[str, Any]) -> Draft202012Validator:
    """A validator for an inline schema with dome's pattern semantics (ECMA 262, as schema_lite)."""
    return _Validator(schema)


@lru_cache(maxsize=None)
def validator(name: str) -> Draft202012Validator:
    schema = _load(name)
    Draft202012Validator.check_schema(schema)
    resolver = _registry().resolver(base_uri=schema.get("$id", ID_PREFIX + name + ".json"))
    bundled = _inline_refs(schema, resolver)
    return _Validator(bundled, registry=_registry())


def _path_key(err: ValidationError) -> list[tuple[int, int | str]]:
    # ints (array indexes) and strs (keys) never compare with each other directly
    return [(0, p) if isinstance(p, int) else (1, str(p)) for p in err.absolute_path]


def _message(err: ValidationError) -> str:
    """The error's message; for anyOf/oneOf, also the most relevant branch's."""
    if err.context:
        best = best_match(err.context)
        if best is not None and err.validator in ("anyOf", "oneOf"):
            # jsonschema's own message repeats the whole instance; name the closest miss instead
            return f"matches none of the {err.validator} alternatives; closest: {best.message}"
        if best is not None and best.message != err.message:
            return f"{err.message} ({best.message})"
    return err.message


def iter_errors(name: str, instance: Any) -> Iterator[dict[str, Any]]:
    for err in sorted(validator(name).iter_errors(instance), key=_path_key):
        yield {
            "path": "/" + "/".join(str(p) for p in err.absolute_path),
            "message": _message(err),
            "validator": err.validator,
        }


def validate(name: str, instance: Any) -> None:
    """Raise SchemaValidationError listing every problem (path + message)."""
    errors = list(iter_errors(name, instance))
    if errors:
        unknown = [e for e in errors if e["validator"] in ("additionalProperties", "unevaluatedProperties")]
        first = errors[0]
        raise SchemaValidationError(
            f"{name}: {first['path']}: {first['message']}",
            details={"schema": name, "errors": errors},
            hints=["remove fields the schema does not define"] if unknown else [],
        )
