"""A small yes/no JSON Schema check for start-up paths that cannot afford jsonschema.

`is_valid(name, instance)` answers whether `instance` conforms to the schema
`name` (draft 2020-12), for schemas written with the keywords below; a
schema that uses any other keyword raises `Unsupported` when it is first
compiled, never a silent pass. It gives no error report: a caller that gets
False (or `Unsupported`) asks `schema_store.validate`, which imports
jsonschema and names every problem. The worker checks its SpawnSpec this way,
so a worker whose spec is good never imports jsonschema (about 45 ms of its
start), and a bad spec is refused with the same SchemaValidationError as
before. A property test holds the two validators to the same verdicts.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable
from urllib.parse import urldefrag, urljoin

from .schema_files import ID_PREFIX, _load, ecma_regex

ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "$defs", "title", "description", "examples", "default",
                         "format", "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding"})
KEYWORDS = frozenset({"$ref", "type", "const", "enum", "required", "properties", "patternProperties",
                      "additionalProperties", "items", "minItems", "maxItems", "minLength", "maxLength", "pattern",
                      "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minProperties",
                      "maxProperties", "uniqueItems", "anyOf", "allOf", "oneOf", "not", "if", "then", "else",
                      "dependentRequired", "propertyNames", "contains", "multipleOf"})


class Unsupported(Exception):
    """The schema uses a keyword this checker does not implement."""


Check = Callable[[Any], bool]


def is_valid(name: str, instance: Any) -> bool:
    return _compiled(name)(instance)


_UNSUPPORTED: set[str] = set()


def validate(name: str, instance: Any) -> None:
    """Return quietly for a conforming instance; otherwise raise what `schema_store.validate`
    raises (the SchemaValidationError naming every problem), so refusals read as before."""
    if name not in _UNSUPPORTED:
        try:
            if _compiled(name)(instance):
                return
        except Unsupported:
            _UNSUPPORTED.add(name)  # not compiled again: jsonschema judges this schema from now on
    from .schema_store import validate as full
    full(name, instance)


# top-level keywords whose verdict depends only on which keys an object has, besides `properties`
_KEY_SET_ONLY = frozenset({"required", "dependentRequired", "minProperties", "maxProperties"})
_SEEN_MAX = 256
_SEEN: dict[tuple[str, frozenset[str]], set[str]] = {}


def validate_varying(name: str, instance: Any, varying: frozenset[str]) -> None:
    """`validate(name, instance)` for one of many objects that differ only in the top-level
    fields `varying` (ids, times, keys): an object whose other fields and key set equal
    those of one that passed before has only its `varying` fields checked, each against its
    property's schema. That holds when the schema's top level judges an object by its key
    set and by each property on its own (`_split`); any other schema, and any object that
    fails, goes through `validate`. Equal `repr`s of the other fields stand for equal values
    (dicts, lists, strings, numbers, booleans and null print distinctly)."""
    props = _split(name) if type(instance) is dict else None
    if props is None or not varying.issubset(props):
        validate(name, instance)
        return
    key = repr(sorted(instance)) + repr(sorted((k, v) for k, v in instance.items() if k not in varying))
    seen = _SEEN.setdefault((name, varying), set())
    if key in seen and all(props[k](instance[k]) for k in varying if k in instance):
        return
    validate(name, instance)
    if len(seen) >= _SEEN_MAX:
        seen.clear()
    seen.add(key)


@lru_cache(maxsize=None)
def _split(name: str) -> dict[str, Check] | None:
    """Each property's check, when the schema's top level is an object schema whose other
    keywords depend only on the key set; None otherwise."""
    doc = _load(name)
    base = doc.get("$id", ID_PREFIX + name + ".json")
    for k, v in doc.items():
        if k in ANNOTATIONS or k in _KEY_SET_ONLY or k == "properties" or k.startswith("x-"):
            continue
        if k == "type" and v == "object":
            continue
        if k == "additionalProperties" and isinstance(v, bool):
            continue
        if k in ("anyOf", "allOf", "oneOf") and all(
                isinstance(sub, dict) and set(sub) <= (ANNOTATIONS | _KEY_SET_ONLY) for sub in v):
            continue
        return None
    try:
        compiler = _Compiler()
        return {n: compiler.compile(sub, base) for n, sub in (doc.get("properties") or {}).items()}
    except Unsupported:
        return None


def compile_schema(schema: Any, base: str = ID_PREFIX + "inline.json") -> Check:
    """A yes/no check for an inline schema ($refs into dome's schemas resolve); Unsupported
    when it uses a keyword this checker lacks."""
    return _Compiler().compile(schema, base)


@lru_cache(maxsize=None)
def _compiled(name: str) -> Check:
    doc = _load(name)
    return _Compiler().compile(doc, doc.get("$id", ID_PREFIX + name + ".json"))


def _doc_by_id(uri: str) -> dict[str, Any]:
    if not uri.startswith(ID_PREFIX):
        raise Unsupported(f"a $ref outside dome's schemas: {uri}")
    return _load(uri[len(ID_PREFIX):].removesuffix(".json"))


def _pointer(doc: Any, fragment: str) -> Any:
    node = doc
    for part in (fragment.lstrip("/").split("/") if fragment.strip("/") else []):
        part = part.replace("~1", "/").replace("~0", "~")
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def _is_type(inst: Any, t: str) -> bool:
    if t == "object":
        return isinstance(inst, dict)
    if t == "array":
        return isinstance(inst, list)
    if t == "string":
        return isinstance(inst, str)
    if t == "boolean":
        return isinstance(inst, bool)
    if t == "null":
        return inst is None
    if isinstance(inst, bool):
        return False
    if t == "number":
        return isinstance(inst, (int, float))
    if t == "integer":
        return isinstance(inst, int) or (isinstance(inst, float) and inst.is_integer())
    raise Unsupported(f"type {t!r}")


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: true and 1 differ, 1 and 1.0 do not."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def _unique(items: list) -> bool:
    """uniqueItems: strings (the usual case) through a set, anything else pairwise by JSON equality."""
    if all(type(x) is str for x in items):
        return len(set(items)) == len(items)
    return not any(_equal(items[i], items[j]) for i in range(len(items)) for j in range(i + 1, len(items)))


def _multiple_of(inst: Any, by: Any) -> bool:
    """As jsonschema decides it: a float divisor by the quotient (exactly, if that overflows),
    any other by the remainder."""
    if isinstance(by, float):
        try:
            return int(inst / by) == inst / by
        except OverflowError:
            from fractions import Fraction
            return (Fraction(inst) / Fraction(by)).denominator == 1
    return not inst % by


class _Compiler:
    def __init__(self) -> None:
        self._refs: dict[str, Check] = {}

    def compile(self, schema: Any, base: str) -> Check:
        if schema is True:
            return lambda inst: True
        if schema is False:
            return lambda inst: False
        if not isinstance(schema, dict):
            raise Unsupported(f"a schema that is a {type(schema).__name__}")
        unknown = {k for k in schema if k not in KEYWORDS and k not in ANNOTATIONS and not k.startswith("x-")}
        if unknown:
            raise Unsupported(f"keywords {sorted(unknown)}")
        base = urljoin(base, schema["$id"]) if "$id" in schema else base
        checks = [self._keyword(k, v, schema, base) for k, v in schema.items() if k in KEYWORDS
                  and k not in ("then", "else", "additionalProperties", "patternProperties")]
        if "additionalProperties" in schema or "patternProperties" in schema:
            checks.append(self._properties_rest(schema, base))
        checks = [c for c in checks if c is not None]
        return lambda inst: all(c(inst) for c in checks)

    def _ref(self, ref: str, base: str) -> Check:
        uri = urljoin(base, ref)
        if uri not in self._refs:
            self._refs[uri] = lambda inst: self._refs[uri + "#compiled"](inst)  # recursion: bound below
            doc_uri, fragment = urldefrag(uri)
            target = _pointer(_doc_by_id(doc_uri), fragment)
            self._refs[uri + "#compiled"] = self.compile(target, doc_uri)
        return self._refs[uri]

    def _keyword(self, k: str, v: Any, schema: dict[str, Any], base: str) -> Check | None:
        if k == "$ref":
            return self._ref(v, base)
        if k == "type":
            types = [v] if isinstance(v, str) else list(v)
            for t in types:
                _is_type(None, t)  # an unknown type name is refused now, not at the first instance
            return lambda inst: any(_is_type(inst, t) for t in types)
        if k == "const":
            return lambda inst: _equal(inst, v)
        if k == "enum":
            return lambda inst: any(_equal(inst, e) for e in v)
        if k == "required":
            names = list(v)
            return lambda inst: not isinstance(inst, dict) or all(n in inst for n in names)
        if k == "properties":
            props = {n: self.compile(s, base) for n, s in v.items()}
            return lambda inst: not isinstance(inst, dict) or all(c(inst[n]) for n, c in props.items() if n in inst)
        if k == "items":
            item = self.compile(v, base)
            return lambda inst: not isinstance(inst, list) or all(item(x) for x in inst)
        if k in ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties"):
            kind = {"I": list, "L": str, "P": dict}[k[3]]
            bound = v
            if k.startswith("min"):
                return lambda inst: not isinstance(inst, kind) or len(inst) >= bound
            return lambda inst: not isinstance(inst, kind) or len(inst) <= bound
        if k == "pattern":
            rx = ecma_regex(v)
            return lambda inst: not isinstance(inst, str) or rx.search(inst) is not None
        if k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            op: Callable[[Any, Any], bool] = {"minimum": lambda a, b: a >= b, "maximum": lambda a, b: a <= b,
                                              "exclusiveMinimum": lambda a, b: a > b,
                                              "exclusiveMaximum": lambda a, b: a < b}[k]
            return lambda inst: not _is_type(inst, "number") or op(inst, v)
        if k == "uniqueItems":
            if not v:
                return None
            return lambda inst: not isinstance(inst, list) or _unique(inst)
        if k in ("anyOf", "allOf", "oneOf"):
            subs = [self.compile(s, base) for s in v]
            if k == "anyOf":
                return lambda inst: any(c(inst) for c in subs)
            if k == "allOf":
                return lambda inst: all(c(inst) for c in subs)
            return lambda inst: sum(1 for c in subs if c(inst)) == 1
        if k == "not":
            sub = self.compile(v, base)
            return lambda inst: not sub(inst)
        if k == "if":
            cond = self.compile(v, base)
            then = self.compile(schema.get("then", True), base)
            else_ = self.compile(schema.get("else", True), base)
            return lambda inst: then(inst) if cond(inst) else else_(inst)
        if k == "dependentRequired":
            deps = {p: list(names) for p, names in v.items()}
            return lambda inst: not isinstance(inst, dict) or all(
                all(n in inst for n in names) for p, names in deps.items() if p in inst)
        if k == "propertyNames":
            key_check = self.compile(v, base)
            return lambda inst: not isinstance(inst, dict) or all(key_check(key) for key in inst)
        if k == "contains":
            sub = self.compile(v, base)
            return lambda inst: not isinstance(inst, list) or any(sub(x) for x in inst)
        if k == "multipleOf":
            return lambda inst: not _is_type(inst, "number") or _multiple_of(inst, v)
        raise Unsupported(k)  # pragma: no cover - KEYWORDS and this function list the same names

    def _properties_rest(self, schema: dict[str, Any], base: str) -> Check:
        """patternProperties, and additionalProperties for what neither names nor patterns cover."""
        named = set(schema.get("properties") or {})
        patterns = [(ecma_regex(p), self.compile(s, base)) for p, s in (schema.get("patternProperties") or {}).items()]
        rest = self.compile(schema.get("additionalProperties", True), base)

        def check(inst: Any) -> bool:
            if not isinstance(inst, dict):
                return True
            for key, val in inst.items():
                matched = False
                for rx, c in patterns:
                    if rx.search(key) is not None:
                        matched = True
                        if not c(val):
                            return False
                if key not in named and not matched and not rest(val):
                    return False
            return True
        return check
