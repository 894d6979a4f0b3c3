"""Deterministic typed Python clients from spec + profile (spec §14, §17).

generate_python_client(registry, tool_id, profile_id) -> {relative path: bytes}

Same registry content + same generator => byte-identical files: no
timestamps, no absolute paths, sorted everything, "\\n" line endings, the
generator's own source digested into the manifest. Files:

    __init__.py          re-exports the client class and the types
    types.py             TypedDicts for every request and response
    client.py            <Tool>Client(transport): one keyword-only method per allowed operation
    filtered_spec.json   the canonical spec_filter(profile) this client was generated from
    manifest.json        GenerationManifest: input refs/digests, generator, output digests

The generated code imports only the standard library: a worker can carry it
without dome installed. `Transport` is anything with
`call(method: str, params: dict) -> dict` (the worker's gateway client).
"""
from __future__ import annotations

import json
import keyword
from pathlib import Path
from typing import Any, Mapping

from .canonical import canonical_json, digest_bytes, digest_json
from .contracts import Registry
from .openrpc import NORMALIZATION_RULES_VERSION, spec_filter

GENERATOR_NAME = "dome.codegen.python"
GENERATOR_VERSION = "1.0.0"
LANGUAGE_TARGET = "python-tool"
_SELF = Path(__file__).resolve()


def generator_digest() -> str:
    """Digest of the generator bundle: this module's bytes plus the normalization rules it uses."""
    return digest_bytes(_SELF.read_bytes() + (_SELF.parent / "openrpc.py").read_bytes())


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.replace(".", "_").split("_") if part)


def _ident(name: str) -> str:
    return name + "_" if keyword.iskeyword(name) else name


def _literal(values: list[Any]) -> str | None:
    if values and all(isinstance(v, (str, int, bool)) or v is None for v in values):
        return "Literal[" + ", ".join(json.dumps(v) if isinstance(v, str) else repr(v) for v in values) + "]"
    return None


def pytype(schema: Any) -> str:
    """A Python type expression for a JSON Schema (conservative: Any when unsure)."""
    if not isinstance(schema, Mapping):
        return "Any"
    if "const" in schema:
        return _literal([schema["const"]]) or "Any"
    if "enum" in schema:
        return _literal(list(schema["enum"])) or "Any"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            parts = sorted({pytype(s) for s in schema[key]})
            return "Any" if "Any" in parts else " | ".join(parts)
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return pytype(schema["allOf"][0])
    t = schema.get("type")
    if isinstance(t, list):
        parts = sorted({pytype({**schema, "type": x}) for x in t})
        return "Any" if "Any" in parts else " | ".join(parts)
    return {
        "string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None",
        "array": f"list[{pytype(schema.get('items', {}))}]", "object": "dict[str, Any]",
    }.get(t, "Any") if t else "Any"


def _typed_dict(name: str, schema: Mapping[str, Any]) -> list[str]:
    props = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    lines = [f"{name} = TypedDict(\"{name}\", {{"]
    for p in sorted(props):
        t = pytype(props[p])
        t = f"Required[{t}]" if p in required else f"NotRequired[{t}]"
        lines.append(f"    {json.dumps(p)}: {t},")
    lines.append("}, total=False)")
    return lines


def _doc(text: str, indent: str) -> str:
    safe = text.replace("\\", "\\\\").replace('"""', "'''")
    return f'{indent}"""{safe}"""'


def _types_py(spec: Mapping[str, Any]) -> str:
    out = [f'"""Request and response types of {spec["contract"]} under profile {spec["profile_id"]}. Generated; do not edit."""',
           "from __future__ import annotations", "", "from typing import Any, Literal, NotRequired, Required, TypedDict", ""]
    for name, m in spec["methods"].items():
        out += ["", *_typed_dict(_camel(name) + "Request", m["params"]), "",
                *_typed_dict(_camel(name) + "Response", m["result"])]
    names = [f"{_camel(n)}{k}" for n in spec["methods"] for k in ("Request", "Response")]
    out += ["", "__all__ = [" + ", ".join(json.dumps(n) for n in names) + "]", ""]
    return "\n".join(out)


def _client_py(spec: Mapping[str, Any], spec_digest: str) -> str:
    cls = _camel(spec["tool_id"]) + "Client"
    methods = list(spec["methods"])
    imports = ", ".join(f"{_camel(n)}Response" for n in methods)
    out = [f'"""Typed client for {spec["contract"]} (profile {spec["profile_id"]}). Generated; do not edit."""',
           "from __future__ import annotations", "", "from typing import Any, Literal, Protocol", "",
           f"from .types import {imports}" if imports else "", "", "",
           "class Transport(Protocol):",
           "    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]: ...", "", "",
           f"class {cls}:",
           _doc(f"{spec['title']}: {spec['description']}", "    "), "",
           f"    TOOL_ID = {json.dumps(spec['tool_id'])}",
           f"    CONTRACT = {json.dumps(spec['contract'])}",
           f"    PROFILE_ID = {json.dumps(spec['profile_id'])}",
           f"    SPEC_DIGEST = {json.dumps(spec_digest)}",
           "    METHODS = (" + "".join(json.dumps(m) + ", " for m in methods) + ")", "",
           "    def __init__(self, transport: Transport) -> None:",
           "        self._transport = transport"]
    for name, m in spec["methods"].items():
        props = m["params"].get("properties") or {}
        required = set(m["params"].get("required") or ())
        req = sorted(p for p in props if p in required)
        opt = sorted(p for p in props if p not in required)
        sig = ["self"] + (["*"] if props else [])
        sig += [f"{_ident(p)}: {pytype(props[p])}" for p in req]
        sig += [f"{_ident(p)}: {pytype(props[p])} | None = None" for p in opt]
        errors = ", ".join(m["errors"]) or "none"
        doc = (f"{m['summary']}.\n\n        side effect: {m['side_effect']}; replay: {m['replay']}; "
               f"idempotency: {m['idempotency'].get('semantics')}; errors: {errors}.\n        ")
        out += ["", f"    def {name}({', '.join(sig)}) -> {_camel(name)}Response:", _doc(doc, "        "),
                "        params: dict[str, Any] = {" + ", ".join(f"{json.dumps(p)}: {_ident(p)}" for p in req) + "}"]
        for p in opt:
            out += [f"        if {_ident(p)} is not None:", f"            params[{json.dumps(p)}] = {_ident(p)}"]
        out += [f"        return self._transport.call({json.dumps(name)}, params)  # type: ignore[return-value]"]
    out.append("")
    return "\n".join(out)


def _init_py(spec: Mapping[str, Any]) -> str:
    cls = _camel(spec["tool_id"]) + "Client"
    return "\n".join([f'"""Generated client package for {spec["contract"]} (profile {spec["profile_id"]})."""',
                      f"from .client import {cls}, Transport", "from .types import *  # noqa: F401,F403", "",
                      f"__all__ = [{json.dumps(cls)}, \"Transport\"]", ""])


def generate_python_client(reg: Registry, tool_id: str, profile_id: str, *,
                           spec_ref: str | None = None, profile_ref: str | None = None,
                           generator_ref: str | None = None) -> dict[str, bytes]:
    spec = spec_filter(reg, tool_id, profile_id)
    spec_bytes = canonical_json(spec)
    spec_digest = digest_bytes(spec_bytes)
    files: dict[str, bytes] = {
        "__init__.py": _init_py(spec).encode(),
        "types.py": _types_py(spec).encode(),
        "client.py": _client_py(spec, spec_digest).encode(),
        "filtered_spec.json": json.dumps(spec, indent=2, sort_keys=True, ensure_ascii=False).encode() + b"\n",
    }
    manifest = {
        "artifact_kind": "dome.generation_manifest/v1", "tool_id": tool_id, "profile_id": profile_id,
        "language_target": LANGUAGE_TARGET,
        "generator": {"name": GENERATOR_NAME, "version": GENERATOR_VERSION,
                      "normalization_rules_version": NORMALIZATION_RULES_VERSION},
        "inputs": {
            "spec": {"ref": spec_ref, "digest": spec_digest},
            "contract": {"ref": spec_ref, "digest": reg.contract(tool_id).digest},
            "profile": {"ref": profile_ref, "digest": digest_json(reg.profile(tool_id, profile_id))},
            "generator_bundle": {"ref": generator_ref, "digest": generator_digest()},
        },
        "outputs": {path: digest_bytes(data) for path, data in sorted(files.items())},
    }
    manifest["client_artifact_hash"] = digest_json(manifest["outputs"])
    files["manifest.json"] = json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n"
    return dict(sorted(files.items()))


def write_files(files: Mapping[str, bytes], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        (out_dir / rel).write_bytes(data)


def diff_files(files: Mapping[str, bytes], out_dir: Path) -> list[str]:
    """Paths that differ from (or are missing in) `out_dir`; [] when up to date."""
    problems = []
    for rel, data in files.items():
        p = out_dir / rel
        if not p.is_file():
            problems.append(f"{rel}: missing")
        elif p.read_bytes() != data:
            problems.append(f"{rel}: differs from a fresh generation")
    extra = sorted(p.name for p in out_dir.glob("*") if p.is_file() and p.name not in files) if out_dir.is_dir() else []
    problems += [f"{name}: not produced by the generator" for name in extra]
    return problems
