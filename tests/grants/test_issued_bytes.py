"""The `grant.issued` payload's bytes are made from the profile's signed bytes, not by
encoding the payload again: they must equal the general encoder's bytes for every grant
(policies, capabilities, egress terms, dropped methods, odd ids), and a grant made without
its signed bytes falls back to the general encoder."""
from __future__ import annotations

import dataclasses
import datetime as _dt

from hypothesis import example, given, settings
from hypothesis import strategies as st

from coordinator.gateway import auth
from coordinator.grants import issue_profile, issued_payload
from registry.canonical import canonical_json
from registry.signing import SigningKey
from tests.grants.conftest import open_ledger

KEY = SigningKey.generate()
_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,30}", fullmatch=True)
_caps = st.lists(st.sampled_from(["read", "write", "read:litho", "write:patch", "read:task", "write:evidence"]),
                 max_size=4)
_egress = st.none() | st.fixed_dictionaries({
    "allow_hosts": st.lists(st.sampled_from(["api.example.com", "llm.internal", "é.example"]), max_size=2),
    "allow_models": st.lists(st.text(max_size=6), max_size=2),
    "budgets": st.fixed_dictionaries({}, optional={"max_tokens": st.integers(0, 10**9),
                                                   "max_model_cost_micros": st.integers(0, 10**9)})})


@settings(max_examples=40, deadline=None)
@given(run=_ids, node=_ids, caps=_caps, egress=_egress, seed=st.integers(0, 2**53 - 1),
       policy=st.sampled_from(["default", "readonly", "strict"]))
def test_issued_bytes_equal_the_general_encoders(run, node, caps, egress, seed, policy) -> None:
    g, issued = auth.issue(key=KEY, run_id=run, wave_id="w0001", node_id=node, node_execution_id="ne-0123abcd",
                           capabilities=caps, ttl_s=600, policy_id=policy, seed=seed,
                           inputs_hash="sha256:" + "1" * 64, worker_public_key=SigningKey.generate().public.raw,
                           egress=egress)
    payload, data = issued_payload(g)
    assert payload == issued
    assert data == canonical_json(payload) == canonical_json(issued)


def test_a_grant_without_its_signed_bytes_is_encoded_the_general_way() -> None:
    g = issue_profile(key=KEY, run_id="run-1", wave_id="w1", node_id="n1", node_execution_id="ne-1",
                      required_capabilities=["write"])
    bare = dataclasses.replace(g, payload_canonical=b"")
    payload, data = issued_payload(bare)
    assert data == canonical_json(payload) == issued_payload(g)[1]


def test_issue_profile_records_grant_issued_with_those_bytes(ops_root) -> None:
    ledger = open_ledger(ops_root)
    g = issue_profile(key=KEY, run_id="run-1", wave_id="w1", node_id="n1", node_execution_id="ne-1",
                      required_capabilities=["write", "read:litho"], ledger=ledger)
    (rec,) = ledger.events("run-1")
    payload, data = issued_payload(g)
    assert rec.topic == "grant.issued" and rec.payload == payload
    assert data in rec.record_bytes and canonical_json(rec.payload) == data
    ledger.close()


def test_the_shipped_registrys_scope_is_derived_once_and_equals_a_fresh_derivation() -> None:
    from coordinator import issuance
    from registry.contracts import default_registry
    from registry.grant_scope import derive_scope
    from tests.grants.conftest import small_budget_registry

    issuance._SCOPES.clear()
    caps = ["write", "read:litho", "write:evidence"]
    a = issue_profile(key=KEY, run_id="run-1", wave_id="w1", node_id="n1", node_execution_id="ne-1",
                      required_capabilities=caps)
    b = issue_profile(key=KEY, run_id="run-1", wave_id="w1", node_id="n2", node_execution_id="ne-2",
                      required_capabilities=caps)
    assert a.scope is b.scope and len(issuance._SCOPES) == 1
    assert a.scope == derive_scope(default_registry(), policy_id="default", card_ref="agent_cli",
                                   required_capabilities=caps)
    reg = small_budget_registry()  # another registry is derived every time, never remembered
    c = issue_profile(key=KEY, run_id="run-1", wave_id="w1", node_id="n3", node_execution_id="ne-3",
                      required_capabilities=caps, registry=reg)
    assert c.scope is not a.scope and len(issuance._SCOPES) == 1
    assert c.scope.budgets != a.scope.budgets


# Instants a datetime can hold in UTC whatever their offset (up to 12 h either way): datetime(1, 1, 1)
# at +01:00 is an instant before year 1, which no datetime holds (astimezone raises OverflowError).
_OFFSETS = st.sampled_from([None, _dt.timezone.utc]) | st.builds(
    _dt.timezone, st.timedeltas(min_value=_dt.timedelta(hours=-12), max_value=_dt.timedelta(hours=12)))
_INSTANTS = st.datetimes(min_value=_dt.datetime(1, 1, 2), max_value=_dt.datetime(9999, 12, 30), timezones=_OFFSETS)


@settings(max_examples=200, deadline=None, derandomize=True)
@example([_dt.datetime(1, 1, 2, tzinfo=_dt.timezone(_dt.timedelta(hours=12)))])
@example([_dt.datetime(9999, 12, 30, 23, 59, 59, 999999, tzinfo=_dt.timezone(_dt.timedelta(hours=-12)))])
@example([_dt.datetime(999, 5, 6, 7, 8, 9, tzinfo=_dt.timezone.utc)])
@given(st.lists(_INSTANTS, min_size=1, max_size=6))
def test_a_remembered_rfc3339_text_is_the_formatting_of_that_instant(dts) -> None:
    from registry import toolprofile as tp
    for dt in dts + dts:
        u = dt.astimezone(_dt.timezone.utc).replace(microsecond=0, tzinfo=None)
        text = tp.rfc3339(dt)
        assert text == u.isoformat() + "Z"  # isoformat writes every year with four digits
        assert tp.parse_rfc3339(text) == u.replace(tzinfo=_dt.timezone.utc)


def test_year_one_is_written_with_four_digits() -> None:
    from registry import toolprofile as tp
    assert tp.rfc3339(_dt.datetime(1, 1, 2, 3, 4, 5, tzinfo=_dt.timezone.utc)) == "0001-01-02T03:04:05Z"


def test_generated_keys_are_distinct_and_sign() -> None:
    keys = [SigningKey.generate() for _ in range(20)]
    assert len({k.kid for k in keys}) == 20
    for k in keys[:3]:
        k.public.verify_pae("t", b"x", k.sign_pae("t", b"x"))
        assert SigningKey(k.seed).kid == k.kid
