"""A batch of records with a signer per record, and payload bytes the caller already holds.

The run loop writes a wave (decision, wave start, each attempt's grant and dispatch, the
acks) as one batch: one head read, one time stamp, one insert, some records signed and
some not. Each record must be byte for byte what appending it alone (same time, id and
chain position) gives; and a payload whose canonical bytes are handed in is stored exactly
as if the ledger had encoded it (type and size still checked).
"""
from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import EventDraft, Ledger
from ledger.errors import InvalidEvent, PayloadTooLarge
from ledger.record import MAX_PAYLOAD_BYTES, build, build_batch, payload_bytes
from registry.canonical import canonical_json
from registry.signing import Keyring, SigningKey

KEY = SigningKey.generate()
_RING = Keyring()
_RING.add(KEY.public)
TS = "2026-11-26T09:00:00.000001Z"
_json = st.recursive(st.none() | st.booleans() | st.integers(-2**53 + 1, 2**53 - 1) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                  max_size=3), max_leaves=8)
_payload = st.dictionaries(st.text(max_size=6), _json, max_size=4)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_payload, st.booleans()), min_size=1, max_size=6))
def test_a_batch_with_a_signer_per_record_is_each_record_built_alone(items) -> None:
    drafts = [EventDraft(topic="task.dispatched", payload=p, node_id=f"n{i}", wave_id="w1")
              for i, (p, _) in enumerate(items)]
    signers = [KEY if signed else None for _, signed in items]
    ids = [f"ev-{i}" for i in range(len(items))]
    records, rows = build_batch(run_id="run-1", drafts=drafts, payloads=[payload_bytes(d.payload) for d in drafts],
                                first_sequence=5, prev_digest="sha256:" + "a" * 64, ts=TS, event_ids=ids,
                                signer=None, signers=signers)
    prev = "sha256:" + "a" * 64
    for k, (d, sg, rec) in enumerate(zip(drafts, signers, records)):
        alone = build(run_id="run-1", sequence=5 + k, event_id=ids[k], ts=TS, draft=d, prev_digest=prev, signer=sg)
        assert rec.record_bytes == alone.record_bytes and rec.signature == alone.signature
        assert rec.kid == alone.kid and rec.record_digest == alone.record_digest
        prev = alone.record_digest
    assert [r[-1] for r in rows] == [r.record_bytes for r in records]


def test_a_signer_list_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError):
        build_batch(run_id="run-1", drafts=[EventDraft(topic="a.b", payload={})], payloads=[b"{}"],
                    first_sequence=1, prev_digest=None, ts=TS, event_ids=["e1"], signer=None, signers=[])


def _fixed(ops_root, name):
    ids = (f"ev-{i:06d}" for i in itertools.count())
    return Ledger(Ledger.open(None, ops_root / name).engines, ops_root / name, clock=lambda: TS,
                  new_ids=lambda n: [next(ids) for _ in range(n)])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=_payload)
def test_payload_bytes_handed_in_are_stored_as_if_the_ledger_had_encoded_them(tmp_path_factory, payload) -> None:
    root = tmp_path_factory.mktemp("ops")
    a, b = _fixed(root, "a"), _fixed(root, "b")
    try:
        ra = a.append("run-1", "grant.issued", payload, signer=KEY)
        with b.transaction() as tx:
            rb = tx.append("run-1", "grant.issued", payload, signer=KEY, payload_canonical=canonical_json(payload))
        rc = b.append("run-1", "grant.issued", payload, signer=KEY, payload_canonical=canonical_json(payload))
        assert ra.record_bytes == rb.record_bytes and ra.signature == rb.signature
        assert [r.record_bytes for r in a.events("run-1")] == [rb.record_bytes]
        assert rc.payload_digest == ra.payload_digest and b.verify(_RING).ok
    finally:
        a.close()
        b.close()


def test_payload_bytes_handed_in_are_still_checked_for_type_and_size() -> None:
    with pytest.raises(InvalidEvent):
        payload_bytes([1], b"[1]")
    big = {"x": "y" * MAX_PAYLOAD_BYTES}
    with pytest.raises(PayloadTooLarge):
        payload_bytes(big, canonical_json(big))
