"""`dome registry check`: every rule the registry must satisfy, as a pure
function from a loaded Registry to a list of precise problems.

Each problem names the file and the rule; an empty list means the registry
is consistent: every schema valid and resolvable, every method in a
contract with existing schemas and a declared error taxonomy, write methods
keyed for idempotency, every resolver mapping resolving to methods of its
class, policies/cards/profiles naming only what exists, and every golden
contract-test case validating against its method's schemas.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from . import schema_store
from .contracts import Registry

WRITE_SIDE_EFFECTS = ("artifact_put", "proposal_register")
_CAP_CLASS = re.compile(r"^(read|write|admin)(:|$)")


@dataclass(frozen=True)
class Problem:
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"

    def to_dict(self) -> dict[str, str]:
        return {"where": self.where, "message": self.message}


def _rel(reg: Registry, path: Any) -> str:
    try:
        return str(path.relative_to(reg.root.parent))
    except (AttributeError, ValueError):
        return str(path)


def _schema_errors(reg: Registry, schema_name: str, instance: Any) -> list[str]:
    try:
        return [f"{e['path']}: {e['message']}" for e in reg.iter_errors(schema_name, instance)]
    except Exception as exc:  # a missing or broken schema is reported by its own check
        return [f"schema {schema_name!r} unusable ({type(exc).__name__})"]


def schema_refs(node: Any) -> Iterable[str]:
    """Every $ref string in a schema, depth first."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                yield v
            else:
                yield from schema_refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from schema_refs(v)


def check_schemas(reg: Registry) -> list[Problem]:
    out: list[Problem] = []
    names = [(n, None) for n in schema_store.schema_names()] + [(n, reg.schemas[n]) for n in sorted(reg.schemas)]
    for name, doc in names:
        where = f"schema {name}"
        try:
            schema = doc if doc is not None else schema_store.load_schema(name)
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            out.append(Problem(where, f"not a valid draft 2020-12 schema: {exc.message}"))
            continue
        except Exception as exc:  # unreadable file
            out.append(Problem(where, f"cannot load: {exc}"))
            continue
        resolver = reg.ref_registry.resolver(base_uri=schema.get("$id", ""))
        for ref in schema_refs(schema):
            try:
                resolver.lookup(ref)
            except Exception:
                out.append(Problem(where, f"$ref {ref!r} does not resolve"))
    return out


def check_contracts(reg: Registry) -> list[Problem]:
    out: list[Problem] = []
    for tool_id, c in sorted(reg.contracts.items()):
        where = _rel(reg, c.path)
        for err in _schema_errors(reg, "registry/skill_contract", dict(c.doc)):
            out.append(Problem(where, f"SkillContract schema: {err}"))
        changelog = c.path.parent.parent / "CHANGELOG.md"
        if changelog.is_file() and f"## {c.version}" not in changelog.read_text():
            out.append(Problem(_rel(reg, changelog), f"has no '## {c.version}' entry for the contract version"))
        for name, m in sorted(c.methods.items()):
            mw = f"{where}: method {name}"
            for which in ("input", "output"):
                sname = getattr(m, which)
                try:
                    schema = reg.schema(sname)
                except Exception:
                    out.append(Problem(mw, f"{which} schema {sname!r} does not exist"))
                    continue
                if which == "input" and schema.get("additionalProperties") is not False:
                    out.append(Problem(mw, f"request schema {sname!r} must be closed (additionalProperties: false)"))
                if which == "output" and schema.get("additionalProperties") is False:
                    out.append(Problem(mw, f"response schema {sname!r} must be open (responses may grow)"))
            for code in m.errors:
                if code not in c.errors:
                    out.append(Problem(mw, f"error {code!r} is not in the contract's error taxonomy"))
            if m.side_effect in WRITE_SIDE_EFFECTS or m.side_effect == "admin":
                if not m.idempotency_key_required:
                    out.append(Problem(mw, f"side effect {m.side_effect} requires idempotency.key_required: true"))
                try:
                    req = set(reg.schema(m.input).get("required", []))
                except Exception:
                    req = set()
                need = {"idempotency_key"} | ({"node_execution_id"} if m.side_effect in WRITE_SIDE_EFFECTS else set())
                if not need <= req:
                    out.append(Problem(mw, f"request schema must require {sorted(need - req)}"))
            if (m.side_effect == "admin") != (m.capability_class == "admin"):
                out.append(Problem(mw, "side effect admin and capability class admin go together"))
            if m.side_effect in WRITE_SIDE_EFFECTS and m.capability_class != "write":
                out.append(Problem(mw, f"side effect {m.side_effect} needs capability class write"))
            if m.capability_class == "read" and m.side_effect != "none":
                out.append(Problem(mw, "a read method has side effect none"))
            if m.spends_single_use and not m.is_write:
                out.append(Problem(mw, "only a write method can spend a single-use grant"))
    return out


def check_policy(reg: Registry) -> list[Problem]:
    out: list[Problem] = []
    rw, pw = "registry/policy/resolver_spec.json", "registry/policy/policy_spec.json"
    for err in _schema_errors(reg, "registry/resolver_spec", reg.resolver):
        out.append(Problem(rw, f"ResolverSpec schema: {err}"))
    for cap, entry in sorted((reg.resolver.get("capabilities") or {}).items()):
        m = _CAP_CLASS.match(cap)
        if not m or m.group(1) != entry.get("class"):
            out.append(Problem(rw, f"capability {cap!r}: its name must start with its class {entry.get('class')!r}"))
        for meth in entry.get("methods") or ():
            if meth not in reg.methods:
                out.append(Problem(rw, f"capability {cap!r} maps to {meth!r}, which no contract defines"))
            elif reg.methods[meth].capability_class != entry.get("class"):
                out.append(Problem(rw, f"capability {cap!r} ({entry.get('class')}) maps to {meth!r} of class "
                                       f"{reg.methods[meth].capability_class}"))
    for err in _schema_errors(reg, "registry/policy_spec", reg.policy):
        out.append(Problem(pw, f"PolicySpec schema: {err}"))
    for pid, pol in sorted((reg.policy.get("policies") or {}).items()):
        for cls, entry in sorted((pol.get("capability_classes") or {}).items()):
            methods = entry.get("methods")
            if isinstance(methods, list):
                for meth in methods:
                    if meth not in reg.methods:
                        out.append(Problem(pw, f"policy {pid!r} class {cls}: unknown method {meth!r}"))
                    elif reg.methods[meth].capability_class != cls:
                        out.append(Problem(pw, f"policy {pid!r} class {cls}: {meth!r} is a {reg.methods[meth].capability_class} method"))
            if cls == "admin" and entry.get("grantable_to_workers"):
                out.append(Problem(pw, f"policy {pid!r}: the admin class is never grantable to workers"))
            families = {m.family for m in reg.methods.values() if m.capability_class == cls}
            for fam in (entry.get("budgets") or {}).get("max_calls_by_family") or {}:
                if fam not in families:
                    out.append(Problem(pw, f"policy {pid!r} class {cls}: budget for unknown method family {fam!r}"))
    for key, card in sorted(reg.cards.items()):
        where = f"registry/a2a/cards/{key}.card.json"
        for err in _schema_errors(reg, "registry/agent_card", card):
            out.append(Problem(where, f"AgentCard schema: {err}"))
        for cap in card.get("capabilities") or ():
            if cap not in (reg.resolver.get("capabilities") or {}):
                out.append(Problem(where, f"capability {cap!r} is not in the resolver spec"))
        for meth in card.get("methods") or ():
            if meth not in reg.methods:
                out.append(Problem(where, f"method {meth!r} is not defined by any contract"))
    return out


def check_profiles(reg: Registry) -> list[Problem]:
    out: list[Problem] = []
    for (tool_id, pid), prof in sorted(reg.profiles.items()):
        where = f"registry/tools/{tool_id}/profiles/{pid}.profile.json"
        for err in _schema_errors(reg, "registry/profile_spec", prof):
            out.append(Problem(where, f"ProfileSpec schema: {err}"))
        if prof.get("tool_id") != tool_id:
            out.append(Problem(where, f"tool_id must be {tool_id!r}"))
        methods = reg.contracts[tool_id].methods if tool_id in reg.contracts else {}
        for side in ("allow", "deny"):
            for op in (prof.get(side) or {}).get("operations") or ():
                if op not in methods:
                    out.append(Problem(where, f"{side}.operations names {op!r}, not a method of {tool_id}"))
    return out


def check_cases(reg: Registry) -> list[Problem]:
    out: list[Problem] = []
    common = {"GRANT_REJECTED", "INVALID_REQUEST", "INTERNAL_ERROR"}
    for tool_id, cases in sorted(reg.cases.items()):
        contract = reg.contracts.get(tool_id)
        for path, case in cases:
            where = _rel(reg, path)
            errs = _schema_errors(reg, "registry/contract_test_case", case)
            for err in errs:
                out.append(Problem(where, f"ContractTestCase schema: {err}"))
            if errs or contract is None:
                continue
            m = contract.methods.get(case["method"])
            if m is None:
                out.append(Problem(where, f"method {case['method']!r} is not in contract {contract.ref}"))
                continue
            req_errs = _schema_errors(reg, m.input, case["request"])
            if case.get("request_invalid"):
                if not req_errs:
                    out.append(Problem(where, f"request is marked invalid but validates against {m.input}"))
            else:
                for err in req_errs:
                    out.append(Problem(where, f"request does not validate against {m.input}: {err}"))
            if "response" in case:
                for err in _schema_errors(reg, m.output, case["response"]):
                    out.append(Problem(where, f"response does not validate against {m.output}: {err}"))
            if "error" in case:
                code = case["error"]["code"]
                if code not in contract.errors and code not in common:
                    out.append(Problem(where, f"error code {code!r} is not in {contract.ref}'s taxonomy"))
                elif code not in m.errors and code not in common:
                    out.append(Problem(where, f"error code {code!r} is not declared by method {m.name}"))
    for tool_id in sorted(reg.contracts):
        covered = {c["method"] for _, c in reg.cases.get(tool_id, [])}
        if not covered:
            out.append(Problem(f"registry/tools/{tool_id}/contract-tests/cases", "no golden cases"))
    return out


def check_registry(reg: Registry) -> list[Problem]:
    """Every rule, in a stable order."""
    out = [Problem("registry", p) for p in reg.load_problems]
    for step in (check_schemas, check_contracts, check_policy, check_profiles, check_cases):
        out.extend(step(reg))
    if "default" not in (reg.policy.get("policies") or {}):
        out.append(Problem("registry/policy/policy_spec.json", "a policy named 'default' must ship"))
    return out
