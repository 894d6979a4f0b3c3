"""Appending: sequence, chain, optimistic concurrency, limits, transactions."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import (MAX_PAYLOAD_BYTES, EventDraft, GrantReplayed, IdempotencyKeyReused,
                    InvalidEvent, PayloadTooLarge, SequenceConflict)
from ledger.record import loads_record, record_digest
from registry.canonical import canonical_json, digest_json


def test_sequence_is_per_run_monotonic_and_chain_links_records(ledger) -> None:
    a1 = ledger.append("run-a", "run.started", {"seed": 1})
    b1 = ledger.append("run-b", "run.started", {"seed": 2})
    a2 = ledger.append("run-a", "task.dispatched", {"n": 1}, task_id="t1", node_id="n1",
                       wave_id="w1", node_execution_id="x1")
    assert (a1.sequence, a2.sequence, b1.sequence) == (1, 2, 1)
    assert a1.prev_digest is None and b1.prev_digest is None
    assert a2.prev_digest == a1.record_digest == record_digest(a1.record_bytes)
    assert a2.payload_digest == digest_json({"n": 1})
    stored = ledger.events("run-a")
    assert [e.record_bytes for e in stored] == [a1.record_bytes, a2.record_bytes]
    assert stored[1].task_id == "t1" and stored[1].wave_id == "w1"
    assert json.loads(a2.record_bytes)["payload"] == {"n": 1}
    assert canonical_json(json.loads(a2.record_bytes)) == a2.record_bytes
    assert ledger.run_ids() == ["run-a", "run-b"]
    assert ledger.events("run-a", since=1) == [stored[1]]


def test_records_conform_to_the_control_event_schema(ledger, signer) -> None:
    from registry.schema_store import validate
    recs = [ledger.append("run-1", "run.started", {"seed": 1}),
            ledger.append("run-1", "gate.computed", {"passed": False}, wave_id="w-1", node_id="n.1",
                          node_execution_id="n.1:x2", task_id="t/1", signer=signer)]
    for rec in recs:
        validate("control_event", rec.to_json())
        validate("envelope", rec.to_json())


@pytest.mark.parametrize("field,value", [("run_id", ""), ("run_id", "has space"), ("task_id", "-x"),
                                         ("wave_id", "w" * 201), ("topic", "Task.Progress"),
                                         ("topic", "progress")])
def test_ids_and_topics_outside_the_schema_are_refused(ledger, field, value) -> None:
    kwargs = {"run_id": "r", "topic": "task.progress", field: value}
    run_id, topic = kwargs.pop("run_id"), kwargs.pop("topic")
    with pytest.raises(InvalidEvent):
        ledger.append(run_id, topic, {}, **kwargs)
    assert ledger.run_ids() == []


def test_expected_sequence_refuses_a_stale_writer(ledger) -> None:
    ledger.append("r", "run.started", {}, expected_sequence=0)
    ledger.append("r", "wave.started", {}, expected_sequence=1)
    with pytest.raises(SequenceConflict) as err:
        ledger.append("r", "wave.started", {"late": True}, expected_sequence=1)
    assert err.value.code == "SEQUENCE_CONFLICT"
    assert err.value.details["actual_sequence"] == 2
    assert [e.sequence for e in ledger.events("r")] == [1, 2]


def test_batch_is_one_chain_and_all_or_nothing(ledger) -> None:
    recs = ledger.append_batch("r", [EventDraft("task.progress", {"i": i}, task_id="t")
                                     for i in range(5)])
    assert [r.sequence for r in recs] == [1, 2, 3, 4, 5]
    assert all(b.prev_digest == a.record_digest for a, b in zip(recs, recs[1:]))
    with pytest.raises(InvalidEvent):
        ledger.append_batch("r", [EventDraft("task.progress", {"ok": 1}),
                                  EventDraft("task.progress", "not an object")])  # type: ignore[arg-type]
    assert ledger.head("r") == 5


def test_payload_above_limit_is_refused_with_blob_hint(ledger) -> None:
    with pytest.raises(PayloadTooLarge) as err:
        ledger.append("r", "task.completed", {"log": "x" * MAX_PAYLOAD_BYTES})
    assert err.value.code == "PAYLOAD_TOO_LARGE"
    assert any("blob" in h for h in err.value.hints)
    assert ledger.head("r") == 0
    ledger.append("r", "task.completed", {"log": "x" * (MAX_PAYLOAD_BYTES - 20)})


def test_transaction_spends_jti_atomically_with_its_events(ledger) -> None:
    with pytest.raises(RuntimeError):
        with ledger.transaction() as tx:
            tx.spend_jti("jti-1", "r", "profile-1")
            tx.append("r", "patch.submitted", {"proposal_id": "p1"})
            raise RuntimeError("gateway crashed before commit")
    assert ledger.head("r") == 0
    with ledger.transaction() as tx:
        tx.spend_jti("jti-1", "r", "profile-1")
        tx.append("r", "patch.submitted", {"proposal_id": "p1"})
    with pytest.raises(GrantReplayed) as err:
        with ledger.transaction() as tx:
            tx.append("r", "patch.submitted", {"proposal_id": "p2"})
            tx.spend_jti("jti-1", "r", "profile-1")
    assert err.value.code == "GRANT_REPLAYED"
    assert [e.payload["proposal_id"] for e in ledger.events("r")] == ["p1"]


def test_idempotency_duplicate_returns_first_result(ledger) -> None:
    with ledger.transaction() as tx:
        assert tx.idempotency_get("r", "submit_patch", "k") is None
        first = tx.idempotency_put("r", "submit_patch", "k", {"proposal_id": "p1"},
                                   request_digest=digest_json({"a": 1}))
    with ledger.transaction() as tx:
        again = tx.idempotency_put("r", "submit_patch", "k", {"proposal_id": "p2"},
                                   request_digest=digest_json({"a": 1}))
        other_method = tx.idempotency_put("r", "put_artifact", "k", {"d": 1})
    assert first == again == {"proposal_id": "p1"} and other_method == {"d": 1}
    assert ledger.idempotency_get("r", "submit_patch", "k") == {"proposal_id": "p1"}
    with pytest.raises(IdempotencyKeyReused):
        with ledger.transaction() as tx:
            tx.idempotency_put("r", "submit_patch", "k", {"x": 1},
                               request_digest=digest_json({"a": 2}))


def test_revocation_by_jti_or_profile_appends_event(ledger, signer) -> None:
    rec = ledger.revoke(jti="j1", run_id="r", reason="worker misbehaved", signer=signer)
    ledger.revoke(profile_id="prof-9", run_id="r", reason="policy change")
    assert rec.topic == "grant.revoked" and rec.signature
    assert ledger.is_revoked("j1") and ledger.is_revoked(None, "prof-9")
    assert ledger.is_revoked("other", "prof-9") and not ledger.is_revoked("j2", "prof-1")
    with pytest.raises(InvalidEvent):
        ledger.revoke(run_id="r", reason="nothing named")


def test_signed_records_verify_and_unknown_keys_fail_closed(ledger, signer, keyring) -> None:
    ledger.append("r", "gate.computed", {"passed": True}, signer=signer)
    ledger.append("r", "task.progress", {"p": 0.5})
    assert ledger.verify(keyring).ok
    report = ledger.verify()  # no keys: a signed record cannot be trusted
    assert not report.ok and report.first_bad.code == "UNKNOWN_KID"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.text(max_size=8),
                       st.recursive(st.none() | st.booleans() | st.integers(-2**53 + 1, 2**53 - 1)
                                    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
                                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
                                    max_leaves=10), max_size=5))
def test_any_json_payload_round_trips_and_verifies(ledger, payload) -> None:
    rec = ledger.append("prop", "task.progress", payload)
    assert ledger.events("prop", since=rec.sequence - 1)[0].record_bytes == rec.record_bytes
    assert canonical_json(loads_record(rec.record_bytes)["payload"]) == canonical_json(payload)
    assert ledger.verify().ok


_ident = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,12}", fullmatch=True)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["task.progress", "gate.computed", "x.y_z.w"]),
                          st.none() | _ident, st.none() | _ident,
                          st.dictionaries(st.text(max_size=5), st.integers(-9, 9) | st.text(max_size=5),
                                          max_size=3)), min_size=1, max_size=6),
       st.booleans())
def test_batch_builder_writes_the_same_bytes_as_the_reference_builder(items, signed) -> None:
    from ledger.record import build, build_batch, payload_bytes
    from registry.signing import SigningKey
    signer = SigningKey(bytes(32)) if signed else None
    drafts = [EventDraft(t, p, wave_id=w, node_id=n) for t, w, n, p in items]
    prev = "sha256:" + "0" * 64
    recs, rows = build_batch(run_id="run-x", drafts=drafts, payloads=[payload_bytes(d.payload) for d in drafts],
                             first_sequence=4, prev_digest=prev, ts="2026-01-01T00:00:00.5Z",
                             event_ids=[f"e-{i}" for i in range(len(drafts))], signer=signer)
    for i, (draft, rec, row) in enumerate(zip(drafts, recs, rows)):
        ref = build(run_id="run-x", sequence=4 + i, event_id=f"e-{i}", ts="2026-01-01T00:00:00.5Z",
                    draft=draft, prev_digest=prev, signer=signer)
        assert rec == ref and rec.record_bytes == ref.record_bytes
        assert row[-1] == ref.record_bytes and row[9] == canonical_json(draft.payload).decode()
        prev = ref.record_digest


def test_a_key_read_absent_is_written_without_a_second_read(ledger) -> None:
    """The gateway reads a call's idempotency key, runs the call, then records its result: the key
    it has just read absent is inserted without reading it again, and a second put of the same key
    in that transaction still answers with the first result (the row is read once more)."""
    from sqlalchemy import event

    reads: list[str] = []
    raw_reads: list[str] = []

    def count(conn, cursor, statement, *rest) -> None:
        if "FROM idempotency_records" in statement:
            reads.append(statement)

    event.listen(ledger.engines.write, "before_cursor_execute", count)
    try:
        with ledger.transaction() as tx:
            raw = getattr(tx._fast, "raw", None)
            if raw is not None:  # SQLite's statements go to the driver: trace them there
                raw.set_trace_callback(lambda sql: raw_reads.append(sql) if "FROM idempotency_records" in sql
                                       else None)
            assert tx.idempotency_get("r", "put_artifact", "k1") is None
            first = tx.idempotency_put("r", "put_artifact", "k1", {"d": 1})
            again = tx.idempotency_put("r", "put_artifact", "k1", {"d": 2})
            if raw is not None:
                raw.set_trace_callback(None)
    finally:
        event.remove(ledger.engines.write, "before_cursor_execute", count)
    assert first == again == {"d": 1}
    assert len(reads) + len(raw_reads) == 2  # the get, and the second put's; not the first put's
