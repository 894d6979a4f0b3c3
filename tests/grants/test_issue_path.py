"""The run loop's schedule path does each piece of work once, and in O(what changed).

- a grant's canonical bytes are made once: the token, the envelope and the profile's
  digest all come from the signed bytes, identical to what the separate steps give;
- the ToolProfile's schema check of a later attempt of the same scope checks only the
  per-attempt fields, with the full validator's verdict on every mutated profile;
- the base of a dependent attempt reads only its ancestors' states, never the whole
  graph or every proposal of the run (an O(N) read per attempt would fail here).
"""
from __future__ import annotations

import copy
import types
from typing import Any, Iterator, Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.gateway import auth
from coordinator.runloop.attempts import ancestor_plan
from coordinator.runloop.derived_base import plan_derived_base
from coordinator.runstate import NodeState
from registry import schema_lite, schema_store
from registry import toolprofile as tp
from registry.canonical import canonical_json, digest_json
from registry.errors import DomeError
from registry.signing import SigningKey
from tests.registry.test_schema_lite import good_spec, mutated, values

SPEC_PER_ATTEMPT = frozenset({"run_id", "wave_id", "node_id", "node_execution_id", "task_id", "created_at",
                              "determinism_seed", "inputs_hash", "attempt", "grant", "tool_profile_ref"})


def _issue(key: SigningKey, neid: str = "ne-0123456789abcdef") -> tuple[Any, dict[str, Any]]:
    return auth.issue(key=key, run_id="run-20261126T000000-abcdef", wave_id="w0001", node_id="t1",
                      node_execution_id=neid, capabilities=["write:patch"], ttl_s=600, policy_id="default",
                      seed=3, inputs_hash="sha256:" + "0" * 64, worker_public_key=SigningKey.generate().public.raw)


def test_a_grant_is_signed_once_and_its_token_digest_and_envelope_match_the_separate_steps() -> None:
    key = SigningKey.generate()
    g, issued = _issue(key)
    assert g.token == tp.envelope_to_token(g.envelope)
    assert g.payload_digest == digest_json(dict(g.payload)) == issued["payload_digest"] == auth.profile_ref(g)
    assert tp.parse_token(g.token)[1] == canonical_json(dict(g.payload))
    envelope, token = tp.sign_body(canonical_json(dict(g.payload)), key)
    assert envelope == tp.sign_payload(dict(g.payload), key) and token == g.token  # Ed25519 is deterministic


def test_later_profiles_of_a_scope_are_checked_field_by_field_and_still_refused_when_bad() -> None:
    key = SigningKey.generate()
    good, _ = _issue(key)
    schema_lite._SEEN.clear()
    checked: list[Any] = []
    real = schema_lite.validate
    try:
        schema_lite.validate = lambda name, inst: (checked.append(name), real(name, inst))[1]  # type: ignore
        _issue(key, "ne-1111111111111111")
        _issue(key, "ne-2222222222222222")
    finally:
        schema_lite.validate = real  # type: ignore
    assert checked == ["tool_profile"]  # the whole schema once per scope, then the per-attempt fields only
    bad = dict(good.payload, jti="not hex", node_execution_id="ne-3333333333333333")
    with pytest.raises(DomeError):
        schema_lite.validate_varying("tool_profile", bad, tp.PER_ATTEMPT_FIELDS)
    extra = dict(good.payload, surprise=1)  # a new key set is never taken from the memo
    with pytest.raises(DomeError):
        schema_lite.validate_varying("tool_profile", extra, tp.PER_ATTEMPT_FIELDS)


def _verdict(name: str, inst: Any) -> bool:
    return not list(schema_store.iter_errors(name, inst))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(), st.sampled_from(sorted(SPEC_PER_ATTEMPT)), values)
def test_the_field_by_field_check_gives_the_full_verdict(spec: dict[str, Any], field: str, value: Any) -> None:
    schema_lite.validate_varying("spawn_spec", good_spec(), SPEC_PER_ATTEMPT)  # what the memo knows
    for inst in (spec, {**good_spec(), field: value}):
        try:
            schema_lite.validate_varying("spawn_spec", copy.deepcopy(inst), SPEC_PER_ATTEMPT)
            ok = True
        except DomeError:
            ok = False
        assert ok == _verdict("spawn_spec", inst), inst


def test_unique_items_of_strings_and_of_mixed_values() -> None:
    check = schema_lite.compile_schema({"type": "array", "uniqueItems": True})
    assert check(["a", "b"]) and not check(["a", "b", "a"])
    assert check([1, True]) and not check([1, 1.0]) and not check([{"a": [1]}, {"a": [1.0]}])


class _Nodes(Mapping[str, Any]):
    """A graph's nodes that count lookups and refuse to be walked whole."""

    def __init__(self, nodes: dict[str, Any]) -> None:
        self._n, self.lookups = nodes, 0

    def __getitem__(self, k: str) -> Any:
        self.lookups += 1
        return self._n[k]

    def __contains__(self, k: object) -> bool:
        return k in self._n

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("the whole graph was walked")

    def __len__(self) -> int:
        return len(self._n)


class _NoWalk(list):
    def __iter__(self) -> Iterator[Any]:
        raise AssertionError("every proposal of the run was read")


@pytest.mark.parametrize("n", [100, 5000])
def test_a_dependent_attempts_base_reads_its_ancestors_only(n: int) -> None:
    # a chain c0 <- c1 <- c2 (c2 depends on c1, c1 on c0) beside n independent, succeeded tasks
    deps = {"c0": (), "c1": ("c0",), "c2": ("c1",), **{f"x{i}": () for i in range(n)}}
    nodes = _Nodes({k: types.SimpleNamespace(dependencies=v) for k, v in deps.items()})
    winners = {k: f"ne-{k}" for k in deps if k != "c2"}
    proposals = {f"ne-{k}": {"proposal_id": f"p-{k}", "node_execution_id": f"ne-{k}"} for k in winners}
    states = {k: NodeState(succeeded_by=winners.get(k)) for k in deps}
    state = types.SimpleNamespace(node=lambda k: states[k], proposal_of=proposals, proposals=_NoWalk([1]))
    plan = ancestor_plan("c2", nodes, state)
    assert [p["proposal_id"] for p in plan] == ["p-c0", "p-c1"]
    assert plan == plan_derived_base("c2", {k: list(v) for k, v in deps.items()},
                                     {k: proposals[v] for k, v in winners.items()})
    assert nodes.lookups <= 6  # the same few lookups whatever the run's size
