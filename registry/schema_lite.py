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

Each schema is compiled once to Python source (`_Compiler`): a function per schema
node with its keywords as plain statements. The coordinator's per-call checks (each
gateway call's arguments, each PatchProposal, each grant) cost a few microseconds
this way, about a tenth of what one closure per keyword cost.
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
    """A yes/no check for an inline schema ($refs into dome's schemas, and into the schema
    itself, resolve); Unsupported when it uses a keyword this checker lacks."""
    return _Compiler(roots={urldefrag(base)[0]: schema}).compile(schema, base)


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
    """Compiles a schema to Python source, once: one function per schema node, whose body is
    the node's keywords as plain statements (in the schema's key order, each returning False
    on a miss), so a check costs a function call per node instead of a closure and a
    generator per keyword. Constants (bounds, enums, regexes, key sets) are names bound in
    the functions' namespace; only str literals (written with `repr`) appear in the source.
    A $ref is a call of the function compiled for its target, so recursion works."""

    def __init__(self, roots: dict[str, Any] | None = None) -> None:
        self._roots = roots or {}  # documents that are no file of dome's schemas (an inline schema)
        self._ns: dict[str, Any] = {"_equal": _equal, "_unique": _unique, "_multiple_of": _multiple_of}
        self._src: list[str] = []
        self._refs: dict[str, str] = {}
        self._n = 0

    def compile(self, schema: Any, base: str) -> Check:
        name = self._node(schema, base)
        if self._src:
            exec(compile("\n".join(self._src), "<schema_lite>", "exec"), self._ns)  # noqa: S102 - our own source
            self._src = []
        return self._ns[name]

    def _const(self, value: Any) -> str:
        self._n += 1
        name = f"_k{self._n}"
        self._ns[name] = value
        return name

    def _node(self, schema: Any, base: str) -> str:
        """The name of the function checking `schema` (its source queued for compile())."""
        self._n += 1
        fn = f"_s{self._n}"
        if schema is True or schema is False:
            self._src.append(f"def {fn}(x):\n    return {schema!r}")
            return fn
        if not isinstance(schema, dict):
            raise Unsupported(f"a schema that is a {type(schema).__name__}")
        unknown = {k for k in schema if k not in KEYWORDS and k not in ANNOTATIONS and not k.startswith("x-")}
        if unknown:
            raise Unsupported(f"keywords {sorted(unknown)}")
        base = urljoin(base, schema["$id"]) if "$id" in schema else base
        body: list[str] = []
        for k, v in schema.items():
            if k in KEYWORDS and k not in ("then", "else", "additionalProperties", "patternProperties"):
                body += self._keyword(k, v, schema, base)
        if "additionalProperties" in schema or "patternProperties" in schema:
            body += self._properties_rest(schema, base)
        lines = [f"def {fn}(x):"] + ["    " + line for line in body] + ["    return True"]
        self._src.append("\n".join(lines))
        return fn

    def _ref(self, ref: str, base: str) -> str:
        uri = urljoin(base, ref)
        name = self._refs.get(uri)
        if name is None:
            self._n += 1
            name = self._refs[uri] = f"_r{self._n}"  # bound before its target compiles: recursion
            doc_uri, fragment = urldefrag(uri)
            doc = self._roots[doc_uri] if doc_uri in self._roots else _doc_by_id(doc_uri)
            target = self._node(_pointer(doc, fragment), doc_uri)
            self._src.append(f"def {name}(x):\n    return {target}(x)")
        return name

    @staticmethod
    def _type_test(t: str) -> str:
        """A Python expression on `x` equal to _is_type(x, t)."""
        _is_type(None, t)  # an unknown type name is refused now, not at the first instance
        return {"object": "isinstance(x, dict)", "array": "isinstance(x, list)", "string": "isinstance(x, str)",
                "boolean": "isinstance(x, bool)", "null": "x is None",
                "number": "(not isinstance(x, bool) and isinstance(x, (int, float)))",
                "integer": "(not isinstance(x, bool) and (isinstance(x, int) or "
                           "(isinstance(x, float) and x.is_integer())))"}[t]

    def _keyword(self, k: str, v: Any, schema: dict[str, Any], base: str) -> list[str]:
        """Statements that return False when `x` fails keyword k (v its value)."""
        number = self._type_test("number")
        if k == "$ref":
            return [f"if not {self._ref(v, base)}(x): return False"]
        if k == "type":
            types = [v] if isinstance(v, str) else list(v)
            return [f"if not ({' or '.join(self._type_test(t) for t in types) or 'False'}): return False"]
        if k == "const":
            return [f"if not _equal(x, {self._const(v)}): return False"]
        if k == "enum":
            values = list(v)
            if values and all(type(e) is str for e in values):  # _equal on strs: same type, equal
                return [f"if not (type(x) is str and x in {self._const(frozenset(values))}): return False"]
            return [f"if not any(_equal(x, e) for e in {self._const(values)}): return False"]
        if k == "required":
            names = [str(n) for n in v]
            if not names:
                return []
            test = " and ".join(f"{n!r} in x" for n in names)
            return [f"if isinstance(x, dict) and not ({test}): return False"]
        if k == "properties":
            out = ["if isinstance(x, dict):"]
            for n, s in v.items():
                out += [f"    if {str(n)!r} in x and not {self._node(s, base)}(x[{str(n)!r}]): return False"]
            return out if len(out) > 1 else []
        if k == "items":
            item = self._node(v, base)
            return ["if isinstance(x, list):", "    for e in x:", f"        if not {item}(e): return False"]
        if k in ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties"):
            kind = {"I": "list", "L": "str", "P": "dict"}[k[3]]
            op = ">=" if k.startswith("min") else "<="
            return [f"if isinstance(x, {kind}) and not (len(x) {op} {self._const(v)}): return False"]
        if k == "pattern":
            return [f"if isinstance(x, str) and {self._const(ecma_regex(v))}.search(x) is None: return False"]
        if k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            op = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}[k]
            return [f"if {number} and not (x {op} {self._const(v)}): return False"]
        if k == "uniqueItems":
            return ["if isinstance(x, list) and not _unique(x): return False"] if v else []
        if k in ("anyOf", "allOf", "oneOf"):
            calls = [f"{self._node(s, base)}(x)" for s in v]
            if k == "anyOf":
                return [f"if not ({' or '.join(calls) or 'False'}): return False"]
            if k == "allOf":
                return [f"if not ({' and '.join(calls) or 'True'}): return False"]
            return [f"if [{', '.join(calls)}].count(True) != 1: return False"]
        if k == "not":
            return [f"if {self._node(v, base)}(x): return False"]
        if k == "if":
            cond = self._node(v, base)
            then = self._node(schema.get("then", True), base)
            else_ = self._node(schema.get("else", True), base)
            return [f"if not ({then}(x) if {cond}(x) else {else_}(x)): return False"]
        if k == "dependentRequired":
            out = ["if isinstance(x, dict):"]
            for p, names in v.items():
                need = " and ".join(f"{str(n)!r} in x" for n in names) or "True"
                out += [f"    if {str(p)!r} in x and not ({need}): return False"]
            return out if len(out) > 1 else []
        if k == "propertyNames":
            key = self._node(v, base)
            return ["if isinstance(x, dict):", "    for e in x:", f"        if not {key}(e): return False"]
        if k == "contains":
            sub = self._node(v, base)
            return [f"if isinstance(x, list) and not any({sub}(e) for e in x): return False"]
        if k == "multipleOf":
            return [f"if {number} and not _multiple_of(x, {self._const(v)}): return False"]
        raise Unsupported(k)  # pragma: no cover - KEYWORDS and this function list the same names

    def _properties_rest(self, schema: dict[str, Any], base: str) -> list[str]:
        """patternProperties, and additionalProperties for what neither names nor patterns cover."""
        named = self._const(frozenset(schema.get("properties") or {}))
        patterns = [(self._const(ecma_regex(p)), self._node(s, base))
                    for p, s in (schema.get("patternProperties") or {}).items()]
        rest = schema.get("additionalProperties", True)
        if not patterns:
            if rest is True:
                return []
            if rest is False:
                return [f"if isinstance(x, dict) and not (x.keys() <= {named}): return False"]
        rest_fn = self._node(rest, base)
        out = ["if isinstance(x, dict):", "    for key, val in x.items():", "        matched = False"]
        for rx, fn in patterns:
            out += [f"        if {rx}.search(key) is not None:", "            matched = True",
                    f"            if not {fn}(val): return False"]
        out += [f"        if not matched and key not in {named} and not {rest_fn}(val): return False"]
        return out
