"""spec_filter(profile) and OpenRPC export, from the one registry source.

`spec_filter` derives the canonical filtered view of a SkillContract for a
ProfileSpec (spec §14): only the profile's allowed (and not denied)
methods, every `$ref` inlined, `$id`/`$schema` of inlined parts dropped,
keys sorted by RFC 8785 canonicalization. The same contract and profile
always give the same bytes; the digest of those bytes is what generated
clients record as their spec input.
"""
from __future__ import annotations

import json
from urllib.parse import urldefrag, urljoin
from typing import Any, Mapping

from .canonical import canonical_json, digest_json
from .contracts import Contract, Registry

OPENRPC_VERSION = "1.3.2"
NORMALIZATION_RULES_VERSION = "dome.spec_filter/v1"


def _deref(reg: Registry, node: Any, base: str, seen: tuple[str, ...] = ()) -> Any:
    """Inline every $ref (our schemas are not recursive; recursion is refused)."""
    if isinstance(node, list):
        return [_deref(reg, v, base, seen) for v in node]
    if not isinstance(node, dict):
        return node
    base = node.get("$id", base)
    if "$ref" in node:
        resolved = reg.ref_registry.resolver(base_uri=base).lookup(node["$ref"])
        target = urljoin(base, node["$ref"])
        if target in seen:
            raise ValueError(f"recursive $ref {node['$ref']!r}")
        inner = _deref(reg, resolved.contents, urldefrag(target).url, seen + (target,))
        rest = {k: _deref(reg, v, base, seen) for k, v in node.items() if k != "$ref"}
        if isinstance(inner, dict):
            inner = {k: v for k, v in inner.items() if k not in ("$id", "$schema", "$defs")}
            if rest:
                return {"allOf": [inner], **rest}
            return inner
        return inner
    return {k: _deref(reg, v, base, seen) for k, v in node.items() if k not in ("$id", "$schema", "$defs")}


def inline_schema(reg: Registry, name: str) -> dict[str, Any]:
    schema = reg.schema(name)
    return _deref(reg, schema, schema.get("$id", ""))


def profile_methods(reg: Registry, tool_id: str, profile: Mapping[str, Any]) -> list[str]:
    contract = reg.contract(tool_id)
    allow = set((profile.get("allow") or {}).get("operations") or ())
    deny = set((profile.get("deny") or {}).get("operations") or ())
    classes = (profile.get("allow") or {}).get("capability_classes")
    return sorted(m for m in contract.methods if m in allow and m not in deny
                  and (classes is None or contract.methods[m].capability_class in classes))


def method_spec(reg: Registry, contract: Contract, name: str) -> dict[str, Any]:
    """One method of a contract as the filtered spec and the OpenRPC document describe it."""
    m = contract.methods[name]
    return {
        "summary": m.summary, "capability_class": m.capability_class, "family": m.family,
        "side_effect": m.side_effect, "replay": m.replay, "idempotency": dict(m.idempotency),
        "cost_units": m.cost_units, "long_running": m.long_running, "requires_consent": m.requires_consent,
        "spends_single_use": m.spends_single_use,
        "params": inline_schema(reg, m.input), "result": inline_schema(reg, m.output),
        "errors": {code: dict(contract.errors[code]) for code in sorted(set(m.errors) | _COMMON)
                   if code in contract.errors},
    }


def spec_filter(reg: Registry, tool_id: str, profile_id: str) -> dict[str, Any]:
    """The canonical filtered spec of `tool_id` under its profile `profile_id`."""
    contract = reg.contract(tool_id)
    profile = reg.profile(tool_id, profile_id)
    methods: dict[str, Any] = {}
    for name in profile_methods(reg, tool_id, profile):
        methods[name] = method_spec(reg, contract, name)
    spec = {
        "artifact_kind": "dome.filtered_spec/v1", "normalization": NORMALIZATION_RULES_VERSION,
        "tool_id": tool_id, "contract": contract.ref, "contract_digest": contract.digest,
        "title": contract.doc.get("title"), "description": contract.doc.get("description"),
        "profile_id": profile_id, "profile_digest": digest_json(profile),
        "auth": (profile.get("auth") or {}).get("mode", "bearer_grant"), "methods": methods,
    }
    return json.loads(canonical_json(spec))  # canonical key order, JSON types only


_COMMON = {"GRANT_REJECTED", "INVALID_REQUEST", "INTERNAL_ERROR"}


def openrpc_document(reg: Registry, *, profile_id: str | None = None, tool_ids: list[str] | None = None) -> dict[str, Any]:
    """An OpenRPC 1.3 document of every tool (or `tool_ids`); with `profile_id`
    each tool is filtered by its profile of that name (tools without it are
    left out). Error codes are positional per document; the dome code is the
    error's message."""
    tools = sorted(tool_ids or reg.contracts)
    methods: list[dict[str, Any]] = []
    for tool_id in tools:
        contract = reg.contract(tool_id)
        if profile_id is not None:
            if (tool_id, profile_id) not in reg.profiles:
                continue
            spec = spec_filter(reg, tool_id, profile_id)
        else:
            spec = {"methods": {n: method_spec(reg, contract, n) for n in sorted(contract.methods)}}
        for name, m in sorted(spec["methods"].items()):
            params = m["params"]
            required = set(params.get("required") or ())
            methods.append({
                "name": name, "summary": m["summary"], "tags": [{"name": tool_id}, {"name": m["capability_class"]}],
                "paramStructure": "by-name",
                "params": [{"name": p, "required": p in required, "schema": s}
                           for p, s in sorted((params.get("properties") or {}).items())],
                "result": {"name": f"{name}_result", "schema": m["result"]},
                "errors": [{"code": 0, "message": code, "data": info} for code, info in sorted(m["errors"].items())],
                "x-dome": {"tool_id": tool_id, "contract": contract.ref, "side_effect": m["side_effect"],
                           "replay": m["replay"], "idempotency": m["idempotency"], "family": m["family"],
                           "cost_units": m["cost_units"], "long_running": m["long_running"],
                           "requires_consent": m["requires_consent"], "spends_single_use": m["spends_single_use"],
                           "params_additional_properties": params.get("additionalProperties", True)},
            })
    all_codes = sorted({e["message"] for m in methods for e in m["errors"]})
    number = {c: -32001 - i for i, c in enumerate(all_codes)}
    for m in methods:
        for e in m["errors"]:
            e["code"] = number[e["message"]]
    doc = {
        "openrpc": OPENRPC_VERSION,
        "info": {"title": "dome tools" + (f" (profile {profile_id})" if profile_id else ""),
                 "version": reg.policy.get("version", "0.0.0"),
                 "description": "Generated from registry/ by `dome registry openrpc`; do not edit."},
        "methods": methods,
    }
    return json.loads(canonical_json(doc))
