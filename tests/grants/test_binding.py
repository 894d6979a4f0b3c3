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
