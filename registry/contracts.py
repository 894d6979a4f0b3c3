"""The tool registry: SkillContracts, their method schemas, profiles, cards and
the policy/resolver specs, loaded from the registry/ folder.

One source for everyone: the gateway (method -> side effect, replay
contract, family), the MCP front door (tools/list schemas), OpenRPC export
and client generation all read a `Registry` built here.

Layout (spec §13):

    registry/tools/<tool_id>/spec/contract.json          the SkillContract
    registry/tools/<tool_id>/spec/schemas/<name>.json    method schemas, $id tools/<tool_id>/<name>
    registry/tools/<tool_id>/profiles/<id>.profile.json  ProfileSpecs
    registry/tools/<tool_id>/contract-tests/cases/*.json golden request/response pairs
    registry/tools/<tool_id>/CHANGELOG.md
    registry/a2a/cards/{runtime,tool}/<id>.card.json     max grantable per runtime/tool
    registry/policy/resolver_spec.json                   capability -> methods
    registry/policy/policy_spec.json                     named policies

A method's `input`/`output` names a schema: "tools/<tool_id>/<name>" for a
file under the tool's spec/schemas, otherwise a name of registry/schemas
(e.g. "litho/evaluate_request"). Method names are unique across contracts,
so a bare method name identifies its contract.

Pure: reading files under a root is the only I/O; nothing else of dome.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, Mapping

from jsonschema import Draft202012Validator
from referencing import Registry as RefRegistry
from referencing import Resource
from referencing.jsonschema import DRAFT202012

from . import schema_store
from .canonical import digest_json
from .errors import DomeError

REGISTRY_ROOT = Path(__file__).resolve().parent
ID_PREFIX = schema_store.ID_PREFIX


class RegistryError(DomeError):
    code = "REGISTRY_ERROR"


class UnknownMethod(RegistryError):
    code = "UNKNOWN_METHOD"


class UnknownTool(RegistryError):
    code = "UNKNOWN_TOOL"


class UnknownProfile(RegistryError):
    code = "UNKNOWN_PROFILE"


@dataclass(frozen=True)
class Method:
    name: str
    tool_id: str
    contract: str  # "contract_id@version"
    capability_class: str
    family: str
    side_effect: str
    replay: str
    idempotency_key_required: bool
    idempotency: Mapping[str, Any]
    cost_units: int
    input: str
    output: str
    errors: tuple[str, ...]
    summary: str
    long_running: bool = False
    requires_consent: bool = False
    spends_single_use: bool = False

    @property
    def is_write(self) -> bool:
        return self.side_effect in ("artifact_put", "proposal_register")

    @property
    def is_admin(self) -> bool:
        return self.capability_class == "admin" or self.side_effect == "admin"


@dataclass(frozen=True)
class Contract:
    tool_id: str
    contract_id: str
    version: str
    capability_class: str
    doc: Mapping[str, Any]
    digest: str
    methods: Mapping[str, Method]
    errors: Mapping[str, Mapping[str, Any]]
    path: Path

    @property
    def ref(self) -> str:
        return f"{self.contract_id}@{self.version}"


@dataclass
class Registry:
    """Everything under one registry root, loaded and indexed."""

    root: Path
    contracts: dict[str, Contract] = field(default_factory=dict)  # by tool_id
    methods: dict[str, Method] = field(default_factory=dict)  # by bare method name
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)  # tool-local schemas by name
    profiles: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (tool_id, profile_id)
    cases: dict[str, list[tuple[Path, dict[str, Any]]]] = field(default_factory=dict)  # by tool_id
    cards: dict[str, dict[str, Any]] = field(default_factory=dict)  # "runtime/<id>" / "tool/<id>"
    resolver: dict[str, Any] = field(default_factory=dict)
    policy: dict[str, Any] = field(default_factory=dict)
    load_problems: list[str] = field(default_factory=list)

    # ---- lookups -------------------------------------------------------
    def method(self, name: str) -> Method:
        """A method by bare name ("submit_patch") or "tool_id.method"."""
        m = self.methods.get(name)
        if m is None and "." in name:
            tool, _, bare = name.partition(".")
            m = self.methods.get(bare)
            if m is not None and m.tool_id != tool:
                m = None
        if m is None:
            raise UnknownMethod(f"no contract defines method {name!r}", details={"method": name})
        return m

    def contract(self, tool_id: str) -> Contract:
        try:
            return self.contracts[tool_id]
        except KeyError:
            raise UnknownTool(f"no tool {tool_id!r} in the registry", details={"tool_id": tool_id},
                              hints=[f"known tools: {', '.join(sorted(self.contracts))}"]) from None

    def profile(self, tool_id: str, profile_id: str) -> dict[str, Any]:
        self.contract(tool_id)
        try:
            return self.profiles[(tool_id, profile_id)]
        except KeyError:
            known = sorted(p for t, p in self.profiles if t == tool_id)
            raise UnknownProfile(f"tool {tool_id!r} has no profile {profile_id!r}",
                                 details={"tool_id": tool_id, "profile_id": profile_id},
                                 hints=[f"profiles of {tool_id}: {', '.join(known)}"]) from None

    def card(self, card_ref: str) -> dict[str, Any]:
        """A card by "runtime/<id>", "tool/<id>" or a bare id (runtime first)."""
        for key in (card_ref, f"runtime/{card_ref}", f"tool/{card_ref}"):
            if key in self.cards:
                return self.cards[key]
        raise RegistryError(f"no agent card {card_ref!r}", code="UNKNOWN_CARD", details={"card": card_ref},
                            hints=[f"known cards: {', '.join(sorted(self.cards))}"])

    def schema(self, name: str) -> dict[str, Any]:
        if name in self.schemas:
            return self.schemas[name]
        return schema_store.load_schema(name)

    def validator(self, name: str) -> Draft202012Validator:
        return _validator(self, name)

    def iter_errors(self, name: str, instance: Any) -> Iterator[dict[str, Any]]:
        for err in sorted(self.validator(name).iter_errors(instance), key=lambda e: list(e.absolute_path)):
            yield {"path": "/" + "/".join(str(p) for p in err.absolute_path), "message": err.message,
                   "validator": err.validator}

    def validate_request(self, method: str, args: Any) -> list[dict[str, Any]]:
        return list(self.iter_errors(self.method(method).input, args))

    def admin_methods(self) -> frozenset[str]:
        return frozenset(n for n, m in self.methods.items() if m.is_admin)

    @property
    def ref_registry(self) -> RefRegistry:
        return _ref_registry(self)

    def __hash__(self) -> int:  # identity hash: lets lru_cache key on a loaded registry
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


@lru_cache(maxsize=8)
def _ref_registry(reg: Registry) -> RefRegistry:
    resources = []
    for name in schema_store.schema_names():
        s = schema_store.load_schema(name)
        resources.append((s.get("$id", ID_PREFIX + name + ".json"),
                          Resource.from_contents(s, default_specification=DRAFT202012)))
    for name, s in reg.schemas.items():
        resources.append((s.get("$id", ID_PREFIX + name + ".json"),
                          Resource.from_contents(s, default_specification=DRAFT202012)))
    return RefRegistry().with_resources(resources)


@lru_cache(maxsize=1024)
def _validator(reg: Registry, name: str) -> Draft202012Validator:
    return Draft202012Validator(reg.schema(name), registry=_ref_registry(reg))


def _read_json(path: Path, problems: list[str]) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        problems.append(f"{path}: not readable JSON: {exc}")
        return None
    if not isinstance(data, dict):
        problems.append(f"{path}: top level must be an object")
        return None
    return data


def _method(tool_id: str, cref: str, name: str, doc: Mapping[str, Any]) -> Method:
    idem = doc.get("idempotency") or {}
    return Method(
        name=name, tool_id=tool_id, contract=cref,
        capability_class=str(doc.get("capability_class", "")), family=str(doc.get("family", "")),
        side_effect=str(doc.get("side_effect", "")), replay=str(doc.get("replay", "")),
        idempotency_key_required=bool(idem.get("key_required", False)), idempotency=dict(idem),
        cost_units=int(doc.get("cost_units", 1)), input=str(doc.get("input", "")), output=str(doc.get("output", "")),
        errors=tuple(doc.get("errors") or ()), summary=str(doc.get("summary", "")),
        long_running=bool(doc.get("long_running", False)), requires_consent=bool(doc.get("requires_consent", False)),
        spends_single_use=bool(doc.get("spends_single_use", False)),
    )


def load_registry(root: Path | str | None = None) -> Registry:
    """Load every contract, schema, profile, case, card and spec under `root`.

    Loading is lenient (problems are collected in `load_problems`) so that
    `dome registry check` can report everything at once; lookups are strict.
    """
    root = Path(root) if root is not None else REGISTRY_ROOT
    reg = Registry(root=root)
    problems = reg.load_problems
    tools_dir = root / "tools"
    for tool_dir in sorted(p for p in tools_dir.iterdir() if p.is_dir()) if tools_dir.is_dir() else []:
        tool_id = tool_dir.name
        for sp in sorted((tool_dir / "spec" / "schemas").glob("*.json")):
            s = _read_json(sp, problems)
            if s is not None:
                name = f"tools/{tool_id}/{sp.stem}"
                expected = ID_PREFIX + name + ".json"
                if s.get("$id") != expected:
                    problems.append(f"{sp}: $id must be {expected!r} (is {s.get('$id')!r})")
                reg.schemas[name] = s
        cpath = tool_dir / "spec" / "contract.json"
        if not cpath.is_file():
            problems.append(f"{tool_dir}: missing spec/contract.json")
            continue
        doc = _read_json(cpath, problems)
        if doc is None:
            continue
        if doc.get("tool_id") != tool_id:
            problems.append(f"{cpath}: tool_id {doc.get('tool_id')!r} does not match its folder {tool_id!r}")
        cref = f"{doc.get('contract_id')}@{doc.get('version')}"
        methods: dict[str, Method] = {}
        for mname, mdoc in sorted((doc.get("methods") or {}).items()):
            if not isinstance(mdoc, Mapping):
                problems.append(f"{cpath}: method {mname!r} is not an object")
                continue
            m = _method(tool_id, cref, mname, mdoc)
            methods[mname] = m
            if mname in reg.methods:
                problems.append(f"{cpath}: method {mname!r} is also defined by tool {reg.methods[mname].tool_id!r}; method names must be unique")
            else:
                reg.methods[mname] = m
        reg.contracts[tool_id] = Contract(
            tool_id=tool_id, contract_id=str(doc.get("contract_id")), version=str(doc.get("version")),
            capability_class=str(doc.get("capability_class")), doc=doc, digest=digest_json(doc),
            methods=methods, errors=dict(doc.get("errors") or {}), path=cpath)
        for pp in sorted((tool_dir / "profiles").glob("*.profile.json")):
            p = _read_json(pp, problems)
            if p is not None:
                pid = pp.name[: -len(".profile.json")]
                if p.get("profile_id") != pid:
                    problems.append(f"{pp}: profile_id {p.get('profile_id')!r} does not match the file name {pid!r}")
                reg.profiles[(tool_id, pid)] = p
        for cp in sorted((tool_dir / "contract-tests" / "cases").glob("*.json")):
            c = _read_json(cp, problems)
            if c is not None:
                reg.cases.setdefault(tool_id, []).append((cp, c))
        if not (tool_dir / "CHANGELOG.md").is_file():
            problems.append(f"{tool_dir}: missing CHANGELOG.md")
    for kind in ("runtime", "tool"):
        for cp in sorted((root / "a2a" / "cards" / kind).glob("*.card.json")):
            c = _read_json(cp, problems)
            if c is not None:
                cid = cp.name[: -len(".card.json")]
                if c.get("card_id") != cid or c.get("kind") != kind:
                    problems.append(f"{cp}: card_id/kind must be {cid!r}/{kind!r}")
                reg.cards[f"{kind}/{cid}"] = c
    for attr, fname in (("resolver", "resolver_spec.json"), ("policy", "policy_spec.json")):
        path = root / "policy" / fname
        if path.is_file():
            data = _read_json(path, problems)
            if data is not None:
                setattr(reg, attr, data)
        else:
            problems.append(f"{path}: missing")
    return reg


@lru_cache(maxsize=1)
def default_registry() -> Registry:
    """The registry shipped in this package (cached: treat it as read-only)."""
    return load_registry(REGISTRY_ROOT)
