"""ToolProfile scope: policy ∩ resolver(required_capabilities(node)) ∩ contracts ∩ card.

Pure functions over registry data. The four sets:

- policy:   per capability class, the methods the named policy allows
            ("*" = every method of that class); the admin class never
            counts for a worker, whatever the policy file says;
- resolver: the methods the node's required capabilities map to
            (registry/policy/resolver_spec.json);
- contract: methods defined by a SkillContract in the registry, in the
            class the policy entry is for;
- card:     the methods the runtime card's capabilities (optionally
            narrowed by its `methods`) map to: the most it may ever get.

A policy's `implicit_capabilities` (the attempt lifecycle: get_task,
report_progress, complete_task) are added to every node's capabilities
before the intersection; they are still bounded by the policy and the card.

A node asking for an admin capability is refused outright
(AdminNotGrantable), not silently trimmed: a planner bug should be loud.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from .contracts import Registry
from .grant_errors import AdminNotGrantable, EmptyGrant, UnknownCapability, UnknownPolicy

BUDGET_SUM_KEYS = ("max_calls", "max_cost")
BUDGET_MIN_KEYS = ("max_wall_seconds",)


@dataclass(frozen=True)
class GrantScope:
    """What a grant may do, before it is bound to a run and signed."""

    policy_id: str
    card_ref: str
    capabilities: tuple[str, ...]
    allowed_methods: tuple[str, ...]
    tool_ids: tuple[str, ...]
    classes: tuple[str, ...]
    single_use: bool
    ttl_seconds: int
    audience: str
    budgets: Mapping[str, Any]
    constraints: Mapping[str, Any]
    # method -> which of the four sets dropped it (for explanations and tests)
    dropped: Mapping[str, str] = field(default_factory=dict)


def intersect(policy: Iterable[str], resolved: Iterable[str], contract: Iterable[str],
              card: Iterable[str], admin: Iterable[str]) -> frozenset[str]:
    """The core rule: the four sets intersected, admin methods removed."""
    return (frozenset(policy) & frozenset(resolved) & frozenset(contract) & frozenset(card)) - frozenset(admin)


def resolve(resolver: Mapping[str, Any], capabilities: Iterable[str]) -> dict[str, str]:
    """capability names -> {method: class}; unknown capability names raise."""
    caps = resolver.get("capabilities") or {}
    out: dict[str, str] = {}
    for cap in capabilities:
        entry = caps.get(cap)
        if entry is None:
            raise UnknownCapability(f"capability {cap!r} is not in the resolver spec", details={"capability": cap},
                                    hints=[f"known capabilities: {', '.join(sorted(caps))}"])
        for m in entry.get("methods") or ():
            out[m] = entry.get("class", "")
    return out


def capability_class(resolver: Mapping[str, Any], cap: str) -> str:
    entry = (resolver.get("capabilities") or {}).get(cap)
    if entry is None:
        raise UnknownCapability(f"capability {cap!r} is not in the resolver spec", details={"capability": cap})
    return str(entry.get("class", ""))


def policy_entry(policy_spec: Mapping[str, Any], policy_id: str) -> Mapping[str, Any]:
    policies = policy_spec.get("policies") or {}
    if policy_id not in policies:
        raise UnknownPolicy(f"no policy named {policy_id!r}", details={"policy_id": policy_id},
                            hints=[f"known policies: {', '.join(sorted(policies))}"])
    return policies[policy_id]


def policy_methods(policy: Mapping[str, Any], method_classes: Mapping[str, str]) -> dict[str, str]:
    """{method: class} the policy allows; `method_classes` is every contract method -> its class."""
    out: dict[str, str] = {}
    for cls, entry in (policy.get("capability_classes") or {}).items():
        if cls == "admin":
            continue  # never grantable to a worker, whatever the file says
        allowed = entry.get("methods")
        for m, mcls in method_classes.items():
            if mcls == cls and (allowed == "*" or (isinstance(allowed, list) and m in allowed)):
                out[m] = cls
    return out


def card_methods(card: Mapping[str, Any], resolver: Mapping[str, Any]) -> frozenset[str]:
    caps = [c for c in card.get("capabilities") or () if c in (resolver.get("capabilities") or {})]
    methods = frozenset(resolve(resolver, caps))
    if card.get("methods") is not None:
        methods &= frozenset(card["methods"])
    return methods


def _merge_budgets(per_class: list[Mapping[str, Any]], families: set[str],
                   caps: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in BUDGET_SUM_KEYS:
        vals = [b[key] for b in per_class if key in b]
        if vals:
            out[key] = sum(vals)
    for key in BUDGET_MIN_KEYS:
        vals = [b[key] for b in per_class if key in b]
        if vals:
            out[key] = min(vals)
    fam: dict[str, int] = {}
    for b in per_class:
        for f, n in (b.get("max_calls_by_family") or {}).items():
            if f in families:
                fam[f] = min(fam.get(f, n), n)
    if fam:
        out["max_calls_by_family"] = dict(sorted(fam.items()))
    for key, val in (caps or {}).items():
        if key == "max_calls_by_family":
            merged = dict(out.get(key, {}))
            for f, n in val.items():
                if f in families:
                    merged[f] = min(merged.get(f, n), n)
            if merged:
                out[key] = dict(sorted(merged.items()))
        else:
            out[key] = min(out[key], val) if key in out else val
    return out


def derive_scope(registry: Registry, *, policy_id: str, card_ref: str,
                 required_capabilities: Iterable[str]) -> GrantScope:
    """policy ∩ resolver(required_capabilities) ∩ contracts ∩ card, for a worker."""
    policy = policy_entry(registry.policy, policy_id)
    caps = tuple(sorted(set(required_capabilities) | set(policy.get("implicit_capabilities") or ())))
    resolver = registry.resolver
    for cap in caps:
        if capability_class(resolver, cap) == "admin":
            raise AdminNotGrantable(f"capability {cap!r} is admin: coordinator-only, never granted to a worker",
                                    details={"capability": cap})
    card = registry.card(card_ref)
    method_classes = {n: m.capability_class for n, m in registry.methods.items()}
    admin = registry.admin_methods()
    resolved = resolve(resolver, caps)
    pol = policy_methods(policy, method_classes)
    cardm = card_methods(card, resolver)
    allowed = intersect(pol, resolved, method_classes, cardm, admin)
    # a resolver entry's class must agree with the contract's class of the method
    allowed = frozenset(m for m in allowed if resolved[m] == method_classes[m])
    dropped: dict[str, str] = {}
    for m in sorted(resolved):
        if m in allowed:
            continue
        dropped[m] = ("contract" if m not in method_classes else "admin" if m in admin
                      else "policy" if m not in pol else "card" if m not in cardm else "class_mismatch")
    if not allowed:
        raise EmptyGrant(
            f"nothing to grant: policy {policy_id!r} ∩ capabilities {list(caps)} ∩ card {card_ref!r} is empty",
            details={"policy_id": policy_id, "capabilities": list(caps), "card": card_ref, "dropped": dropped})
    classes = tuple(sorted({method_classes[m] for m in allowed}))
    class_entries = [policy["capability_classes"][c] for c in classes]
    families = {registry.methods[m].family for m in allowed}
    budgets = _merge_budgets([e.get("budgets") or {} for e in class_entries], families, card.get("budget_caps"))
    constraints = dict(policy.get("constraints") or {})
    if "write" not in classes:
        constraints["write_roots"] = []
    return GrantScope(
        policy_id=policy_id, card_ref=card_ref, capabilities=caps, allowed_methods=tuple(sorted(allowed)),
        tool_ids=tuple(sorted({registry.methods[m].tool_id for m in allowed})), classes=classes,
        single_use=any(e.get("single_use", False) for e in class_entries),
        ttl_seconds=min(int(e["ttl_seconds"]) for e in class_entries),
        audience=str(policy.get("audience", "dome-gateway")),
        budgets=budgets, constraints=constraints, dropped=dropped)
