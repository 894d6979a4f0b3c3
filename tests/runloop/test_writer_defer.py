"""A gateway call's charge is deferred to go in with the tool's event (one insert): the
ledger it leaves is byte for byte the one two appends leave, and nothing else changes.

Two real SQLite ledgers with the same clock and event ids take the same calls, one through
the deferred path and one appending at once; their records must be identical bytes, in the
same order, with a chain that verifies. A deferred record is stored before anything reads
or writes the run's events, at the end of the transaction's body, and never when the body
raises."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from coordinator.runloop.writer import LedgerWriter, WriterLedger, _TxRecorder
from coordinator.runstate import RunState
from ledger import Ledger
from registry.signing import SigningKey

RUN = "run-defer"
CHARGE = {"profile_id": "tp_1", "jti": "j1", "method": "put_artifact", "family": "artifact.write",
          "cost_units": 1, "at": 1.5, "spent_jti": False, "outcome": "ok", "idempotency_key": "k-00000001",
          "args_digest": "sha256:" + "0" * 64}
EVENT = {"node_execution_id": "ne-1", "digest": "sha256:" + "1" * 64, "size": 3, "media_type": "text/plain",
         "name": None, "method": "put_artifact", "idempotency_key": "k-00000001"}
KEYS = {"wave_id": "w1", "node_execution_id": "ne-1"}
EV_KEYS = {"node_id": "n1", "wave_id": "w1", "node_execution_id": "ne-1", "task_id": "n1"}


def _ledger(root: Path) -> Ledger:
    ledger = Ledger.open(None, root)
    ledger._clock = lambda: "2026-11-26T00:00:00.000000Z"
    counter = iter(range(10_000))
    ledger._new_ids = lambda n: [f"0000000{next(counter):05d}-0000-7000-8000-000000000000" for _ in range(n)]
    return ledger


@pytest.fixture
def pair(tmp_path: Path):
    out = []
    for name in ("deferred", "direct"):
        ledger = _ledger(tmp_path / name)
        writer = LedgerWriter(ledger, RUN, SigningKey.generate(), RunState())
        out.append((ledger, writer, WriterLedger(writer)))
    yield out
    for ledger, _, _ in out:
        ledger.close()


def _rows(ledger: Ledger) -> list[tuple[Any, ...]]:
    return [(e.sequence, e.topic, e.record_bytes, e.record_digest, e.prev_digest) for e in ledger.events(RUN)]


def _calls(wl: WriterLedger, defer: bool, body: Callable[[Any], None]) -> None:
    with wl.batch():
        for i in range(3):
            with wl.transaction() as tx:
                (tx.defer if defer else tx.append)(RUN, "grant.call", {**CHARGE, "at": i}, **KEYS)
                body(tx)


def _tool_call(tx: Any) -> None:
    tx.idempotency_get(RUN, "put_artifact", "k-00000001")  # reads no events: the charge stays deferred
    tx.append(RUN, "artifact.put", EVENT, **EV_KEYS)


@pytest.mark.parametrize("body", [_tool_call, lambda tx: None, lambda tx: [tx.append(RUN, "task.progress", {"f": 1},
                                                                                      **EV_KEYS) for _ in range(2)]],
                         ids=["charge-and-event", "charge-alone", "charge-and-two-events"])
def test_deferred_charges_leave_the_same_bytes_as_direct_appends(pair, body) -> None:
    (l1, w1, wl1), (l2, w2, wl2) = pair
    _calls(wl1, True, body)
    _calls(wl2, False, body)
    assert _rows(l1) == _rows(l2) and len(_rows(l1)) >= 3
    assert w1.state == w2.state and w1.appends == w2.appends == len(_rows(l1))
    assert l1.verify().ok


def test_a_deferred_record_is_stored_before_a_read_of_the_events(pair) -> None:
    (ledger, _, wl), _ = pair
    with wl.transaction() as tx:
        tx.defer(RUN, "grant.call", CHARGE, **KEYS)
        assert tx.last_payload(RUN, ["grant.call"]) == CHARGE  # flushed before the read
        assert tx.head(RUN)[0] == 1


def test_a_signed_append_after_a_deferred_record_keeps_the_order(pair) -> None:
    (ledger, writer, wl), _ = pair
    with wl.transaction() as tx:
        tx.defer(RUN, "grant.call", CHARGE, **KEYS)
        tx.append(RUN, "task.progress", {"f": 1}, signer=writer.signer, **EV_KEYS)
    events = ledger.events(RUN)
    assert [e.topic for e in events] == ["grant.call", "task.progress"]
    assert events[0].signature is None and events[1].signature is not None


def test_a_body_that_raises_stores_nothing_it_deferred(pair) -> None:
    (ledger, writer, wl), _ = pair
    with pytest.raises(RuntimeError):
        with wl.transaction() as tx:
            tx.defer(RUN, "grant.call", CHARGE, **KEYS)
            raise RuntimeError("the call failed")
    with wl.batch():
        with pytest.raises(RuntimeError):
            with wl.transaction() as tx:
                tx.defer(RUN, "grant.call", CHARGE, **KEYS)
                tx.append(RUN, "artifact.put", EVENT, **EV_KEYS)
                raise RuntimeError("the call failed after its writes")
    assert ledger.events(RUN) == [] and writer.appends == 0


def test_keys_a_draft_does_not_take_are_appended_as_before(pair) -> None:
    (ledger, _, wl), _ = pair
    with wl.transaction() as tx:
        assert isinstance(tx, _TxRecorder)
        tx.defer(RUN, "grant.call", CHARGE, **KEYS)
        tx.append(RUN, "artifact.put", EVENT, expected_sequence=1, **EV_KEYS)  # flushed first: seq 1 exists
    assert [e.sequence for e in ledger.events(RUN)] == [1, 2]
