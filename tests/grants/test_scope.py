"""Grant scope = policy ∩ resolver(required_capabilities) ∩ contracts ∩ card; admin never."""
from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.contracts import default_registry, load_registry, REGISTRY_ROOT
from registry.grant_errors import AdminNotGrantable, EmptyGrant, UnknownCapability, UnknownPolicy
from registry.grant_scope import card_methods, derive_scope, policy_entry, policy_methods, resolve

REG = default_registry()
ALL_METHODS = sorted(REG.methods)
CAPS = sorted(REG.resolver["capabilities"])
WORKER_CAPS = [c for c in CAPS if REG.resolver["capabilities"][c]["class"] != "admin"]


def test_default_write_node_gets_proposal_methods_only() -> None:
    s = derive_scope(REG, policy_id="default", card_ref="agent_cli", required_capabilities=["write"])
    assert s.allowed_methods == ("complete_task", "get_task", "put_artifact", "report_progress", "submit_metadata",
                                 "submit_patch")
    assert s.single_use is True and s.classes == ("read", "write")
    assert s.budgets["max_calls_by_family"]["proposal.write"] == 20


def test_card_caps_what_a_node_asks_for() -> None:
    s = derive_scope(REG, policy_id="default", card_ref="agent_cli", required_capabilities=["read", "read:litho"])
    assert not {"simulate", "evaluate", "optimize"} & set(s.allowed_methods)
    assert s.dropped["optimize"] == "card"


def test_policy_caps_what_a_card_allows() -> None:
    s = derive_scope(REG, policy_id="strict", card_ref="litho_worker", required_capabilities=["read:litho", "write"])
    assert "optimize" not in s.allowed_methods and "evaluate" in s.allowed_methods
    assert "submit_metadata" not in s.allowed_methods
    assert s.dropped["optimize"] == "policy"


def test_admin_capability_is_refused_for_workers() -> None:
    for cap in ("admin", "admin:integration"):
        with pytest.raises(AdminNotGrantable) as info:
            derive_scope(REG, policy_id="default", card_ref="agent_cli", required_capabilities=["read", cap])
        assert info.value.code == "GRANT_ADMIN_NOT_GRANTABLE"


def test_admin_methods_stay_out_even_if_policy_card_and_resolver_name_them() -> None:
    reg = load_registry(REGISTRY_ROOT)
    reg.policy = copy.deepcopy(reg.policy)
    pol = reg.policy["policies"]["default"]["capability_classes"]
    pol["read"]["methods"] = "*"
    pol["admin"]["methods"] = "*"
    pol["admin"]["grantable_to_workers"] = True
    reg.resolver = copy.deepcopy(reg.resolver)
    reg.resolver["capabilities"]["read"]["methods"] += ["promote", "apply_patch"]  # a poisoned resolver
    card = "runtime/agent_cli"
    reg.cards = copy.deepcopy(reg.cards)
    reg.cards[card]["capabilities"].append("admin")
    s = derive_scope(reg, policy_id="default", card_ref="agent_cli", required_capabilities=["read"])
    assert not set(s.allowed_methods) & reg.admin_methods()


def test_unknown_names_fail_closed() -> None:
    with pytest.raises(UnknownCapability):
        derive_scope(REG, policy_id="default", card_ref="agent_cli", required_capabilities=["write:everything"])
    with pytest.raises(UnknownPolicy):
        derive_scope(REG, policy_id="lenient", card_ref="agent_cli", required_capabilities=["read"])


def test_empty_intersection_is_an_error() -> None:
    reg = _fresh()
    reg.cards = {"runtime/bare": {"artifact_kind": "dome.agent_card/v1", "card_id": "bare", "version": "1.0.0",
                                  "kind": "runtime", "capabilities": ["read:litho"]}}
    with pytest.raises(EmptyGrant) as info:
        derive_scope(reg, policy_id="readonly", card_ref="bare", required_capabilities=["write"])
    assert info.value.code == "GRANT_SCOPE_EMPTY"


def test_readonly_policy_still_lets_an_attempt_report_and_complete() -> None:
    s = derive_scope(REG, policy_id="readonly", card_ref="validator", required_capabilities=["read"])
    assert {"get_task", "report_progress", "complete_task"} <= set(s.allowed_methods)
    assert not {"submit_patch", "put_artifact", "submit_metadata"} & set(s.allowed_methods)


# ---- property: the issued profile never exceeds any of the four sets -------------
_classes = st.sampled_from(["read", "write"])


@st.composite
def worlds(draw: Any) -> tuple[dict, dict, list[str]]:
    """A random policy entry, a random card and a random node."""
    classes: dict[str, Any] = {}
    for cls in draw(st.sets(st.sampled_from(["read", "write", "admin"]), min_size=1)):
        methods = draw(st.one_of(st.just("*"), st.lists(st.sampled_from(ALL_METHODS), unique=True)))
        classes[cls] = {"methods": methods, "ttl_seconds": draw(st.integers(1, 86400)),
                        "single_use": draw(st.booleans()),
                        "budgets": {"max_calls": draw(st.integers(0, 1000))}}
    policy = {"audience": "dome-gateway", "capability_classes": classes,
              "constraints": {"read_roots": ["."], "write_roots": ["."], "deny_globs": [], "network": {"allow_hosts": []}, "exec": {}},
              "validation": {"suites_by_risk": {}, "counts": "final_head_only"}, "human_gate": {"required_for_risk": []}}
    card = {"artifact_kind": "dome.agent_card/v1", "card_id": "rnd", "version": "1.0.0", "kind": "runtime",
            "capabilities": draw(st.lists(st.sampled_from(CAPS), unique=True))}
    if draw(st.booleans()):
        card["methods"] = draw(st.lists(st.sampled_from(ALL_METHODS), unique=True))
    if draw(st.booleans()):
        policy["implicit_capabilities"] = draw(st.lists(st.sampled_from(WORKER_CAPS), unique=True, max_size=2))
    node = draw(st.lists(st.sampled_from(WORKER_CAPS), unique=True, min_size=1))
    return policy, card, node


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_property_issued_scope_never_exceeds_any_of_the_four_sets(world: tuple[dict, dict, list[str]]) -> None:
    policy, card, node = world
    reg = _fresh()
    reg.policy = {"policies": {"p": policy}, "version": "1.0.0"}
    reg.cards = {"runtime/rnd": card}
    method_classes = {n: m.capability_class for n, m in reg.methods.items()}
    try:
        s = derive_scope(reg, policy_id="p", card_ref="rnd", required_capabilities=node)
    except EmptyGrant:
        return
    got = set(s.allowed_methods)
    assert got <= set(policy_methods(policy_entry(reg.policy, "p"), method_classes))  # policy
    asked = set(node) | set(policy.get("implicit_capabilities", ()))
    assert got <= set(resolve(reg.resolver, asked))  # resolver(required_capabilities(node))
    assert got <= set(reg.methods)  # contracts
    assert got <= set(card_methods(card, reg.resolver))  # card
    assert not got & reg.admin_methods()  # admin never
    assert all(method_classes[m] in policy["capability_classes"] for m in got)
    assert s.ttl_seconds == min(policy["capability_classes"][c]["ttl_seconds"] for c in s.classes)


_FRESH = None


def _fresh():
    global _FRESH
    if _FRESH is None:
        _FRESH = load_registry(REGISTRY_ROOT)
    reg = copy.copy(_FRESH)
    return reg
