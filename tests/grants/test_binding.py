"""A proposal belongs to the grant that submitted it (coordinator.integration.binding),
judged alone: each bound field, at the top level and in worker_run_meta."""
from __future__ import annotations

import pytest

from coordinator.integration.binding import BOUND_FIELDS, ProposalBindingMismatch, bind, binding_mismatches, \
    check_binding

GRANT = {"run_id": "r1", "wave_id": "w1", "node_id": "a", "node_execution_id": "ne-1", "attempt": 1,
         "profile_id": "p"}


def test_a_proposal_that_claims_its_own_attempt_binds_cleanly() -> None:
    prop = {"proposal_id": "x", **{k: GRANT[k] for k in BOUND_FIELDS}, "worker_run_meta": {"attempt": "1"}}
    assert binding_mismatches(prop, GRANT) == []
    check_binding(prop, GRANT)
    out = bind({"proposal_id": "x"}, GRANT)
    assert out == {"proposal_id": "x", **{k: GRANT[k] for k in BOUND_FIELDS}}  # the grant's values, nothing else


@pytest.mark.parametrize("field", BOUND_FIELDS)
@pytest.mark.parametrize("meta", [False, True])
def test_each_field_claimed_otherwise_is_refused(field: str, meta: bool) -> None:
    claim = {field: "other"}
    prop = {"proposal_id": "x", **({"worker_run_meta": claim} if meta else claim)}
    want = [{"field": ("worker_run_meta." if meta else "") + field, "claimed": "other", "grant": GRANT[field]}]
    assert binding_mismatches(prop, GRANT) == want
    with pytest.raises(ProposalBindingMismatch) as exc:
        check_binding(prop, GRANT)
    assert exc.value.details["mismatches"] == want
    bound = bind(prop, GRANT)
    assert bound[field] == GRANT[field] and bound["binding_mismatches"] == want


def test_a_key_the_grant_lacks_is_not_judged_and_odd_meta_is_ignored() -> None:
    grant = {**GRANT, "wave_id": None}
    assert binding_mismatches({"wave_id": "w9", "worker_run_meta": "not a mapping"}, grant) == []
    assert bind({"wave_id": "w9"}, grant)["wave_id"] == "w9"  # a grant value of None overrides nothing


def test_only_a_resolver_naming_its_own_spawn_may_carry_resolves() -> None:
    """The pure rule behind PROPOSAL_PROVENANCE_FORGED: `resolves` passes only when it names the
    submitting attempt's recorded resolver spawn; every other coordinator-owned field never does."""
    from coordinator.integration.binding import forged_provenance

    spawn = {"proposal_id": "pp-1", "origin": "pp-0"}
    mine = {"resolves": {"proposal_id": "pp-1", "origin_proposal_id": "pp-0"}}
    assert forged_provenance({"diff_digest": "sha256:x"}, None) == []
    assert forged_provenance(mine, spawn) == []
    assert forged_provenance(mine, None) == [{"field": "resolves", "claimed": mine["resolves"]}]
    other = {"resolves": {"proposal_id": "pp-1", "origin_proposal_id": "pp-9"}}
    assert [f["field"] for f in forged_provenance(other, spawn)] == ["resolves"]
    assert [f["field"] for f in forged_provenance({"resolves": {"proposal_id": "pp-2"}}, spawn)] == ["resolves"]
    assert [f["field"] for f in forged_provenance({"resolves": "pp-1"}, spawn)] == ["resolves"]
    assert [f["field"] for f in forged_provenance({**mine, "binding_mismatches": []}, spawn)] == ["binding_mismatches"]
