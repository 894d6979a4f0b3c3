"""The run's single writer: every append goes through here, in order.

The run loop and the gateway (another thread) both append events for the
run. LedgerWriter serializes them under one lock and applies each stored
record to the in-memory RunState (coordinator.runstate.apply) in ledger
sequence order, so the state the scheduler reads is always exactly
`fold(events[:last_sequence])`: what a replay of the ledger computes.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from ledger.record import EventDraft, payload_bytes
from registry.signing import SigningKey

from ..runstate import RunState, apply, apply_many

if TYPE_CHECKING:
    from ledger import Ledger


class LedgerWriter:
    def __init__(self, ledger: Ledger, run_id: str, signer: SigningKey, state: RunState,
                 on_record: Callable[[Any], None] | None = None,
                 guard: Callable[[], None] | None = None, quiet: frozenset[str] = frozenset()) -> None:
        self.ledger = ledger
        self.quiet = quiet  # topics whose records do not wake a waiter (nothing for it to act on)
        self.guard = guard or (lambda: None)  # raises when this process may no longer write (lost lease)
        self.run_id = run_id
        self.signer = signer
        self.state = state
        self.on_record = on_record
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.appends = 0

    def _applied(self, records: Iterable[Any]) -> None:
        """The stored records reach the run state (all of a transaction's in one step), then
        `on_record` hears each, in order, with the state holding them all."""
        records = list(records)
        if not records:
            return
        self.state = apply(self.state, records[0]) if len(records) == 1 else apply_many(self.state, records)
        self.appends += len(records)
        quiet = self.quiet
        wake = any(rec.topic not in quiet for rec in records)
        if self.on_record is not None:
            for rec in records:
                self.on_record(rec)
        if wake:
            self.changed.notify_all()

    def append(self, topic: str, payload: dict[str, Any], *, signed: bool = False, **keys: Any) -> Any:
        with self.lock:
            self.guard()
            rec = self.ledger.append(self.run_id, topic, payload, signer=self.signer if signed else None, **keys)
            self._applied([rec])
            return rec

    def append_many(self, drafts: list[tuple[str, dict[str, Any], dict[str, Any]]], *,
                    signed: bool | frozenset[str] = False) -> list[Any]:
        """Append several (topic, payload, keys) in one transaction, as one batch of records
        (one time stamp). `signed`: all, none, or the set of topics to sign (decisions and
        grants). `keys` may hold `payload_canonical`, the payload's RFC 8785 bytes when the
        caller already made them (a grant's profile): they are used as given."""
        signer = self.signer
        signers = [signer if (signed if isinstance(signed, bool) else t in signed) else None for t, _, _ in drafts]
        events = []
        payloads = []
        for t, p, k in drafts:
            if "payload_canonical" in k:
                k = dict(k)
                payloads.append(k.pop("payload_canonical"))
            else:
                payloads.append(payload_bytes(p))
            events.append(EventDraft(topic=t, payload=p, **k))
        with self.lock:
            self.guard()
            with self.ledger.transaction() as tx:
                recs = tx.append_batch(self.run_id, events, signers=signers, payloads=payloads)
            self._applied(recs)
            return recs

    def transact(self, fn: Callable[[Any], Any]) -> Any:
        """Run fn(tx) in one ledger transaction; records it returns (as result[1]) are applied."""
        with self.lock:
            self.guard()
            with self.ledger.transaction() as tx:
                result, records = fn(tx)
            self._applied(records)
            return result

    def revoke(self, *, jti: str | None, profile_id: str | None, reason: str) -> None:
        with self.lock:
            self.guard()
            rec = self.ledger.revoke(jti=jti, profile_id=profile_id, run_id=self.run_id, reason=reason)
            self._applied([rec] if rec is not None else [])

    def wait(self, timeout: float) -> None:
        with self.lock:
            self.changed.wait(timeout)


_DRAFT_KEYS = frozenset({"wave_id", "node_id", "node_execution_id", "task_id"})
# what a deferred record may be stored after: statements that read or write no events
_NO_EVENTS = frozenset({"idempotency_get", "idempotency_put", "spend_jti", "is_spent", "is_revoked"})


class _TxRecorder:
    """A ledger transaction that remembers the records appended through it.

    `defer` holds one unsigned record back to be stored with the next one appended (one
    `append_batch`: the same records, sequences and chain as two appends, one insert): the
    grants verifier defers each call's charge so that it goes in with the tool's event. It
    is stored before anything that reads or writes the run's events, and at the latest when
    the transaction's body returns; a body that raises rolls back with it either way."""

    def __init__(self, tx: Any, records: list) -> None:
        self._tx = tx
        self._records = records
        self._held: tuple[str, Any] | None = None  # (run_id, EventDraft) deferred

    def defer(self, run_id: str, topic: str, payload: dict[str, Any], **keys: Any) -> None:
        from ledger.record import EventDraft
        self.flush()
        if not set(keys) <= _DRAFT_KEYS or not hasattr(self._tx, "append_batch"):
            self.append(run_id, topic, payload, **keys)
            return
        self._held = (run_id, EventDraft(topic=topic, payload=payload, **keys))

    def flush(self) -> None:
        """Store the deferred record now, if any."""
        held, self._held = self._held, None
        if held is not None:
            self._records.extend(self._tx.append_batch(held[0], [held[1]]))

    def append(self, run_id: str, topic: str, payload: dict[str, Any], **k: Any) -> Any:
        held = self._held
        if held is not None and held[0] == run_id and k.keys() <= _DRAFT_KEYS:
            from ledger.record import EventDraft
            self._held = None
            recs = self._tx.append_batch(run_id, [held[1], EventDraft(topic=topic, payload=payload, **k)])
            self._records.extend(recs)
            return recs[-1]
        self.flush()
        rec = self._tx.append(run_id, topic, payload, **k)
        self._records.append(rec)
        return rec

    def append_batch(self, *a: Any, **k: Any) -> list:
        self.flush()
        recs = self._tx.append_batch(*a, **k)
        self._records.extend(recs)
        return recs

    def revoke(self, *a: Any, **k: Any) -> Any:
        self.flush()
        rec = self._tx.revoke(*a, **k)
        self._records.append(rec)
        return rec

    def __getattr__(self, name: str) -> Any:
        if name not in _NO_EVENTS:
            self.flush()
        return getattr(self._tx, name)


class WriterLedger:
    """A Ledger facade for components that write on their own (the grants
    verifier): every write of this run goes through the LedgerWriter's lock
    and is applied to the run state in sequence order, once it is durable."""

    def __init__(self, writer: LedgerWriter) -> None:
        self._w = writer
        self._l = writer.ledger
        self._pending: list | None = None  # inside a batch: records stored, not yet committed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._l, name)

    def run_finished(self) -> bool:
        """Whether run.finished is recorded: after it, components write nothing for the run."""
        return self._w.state.finished is not None

    def _apply(self, records: list) -> None:
        if self._pending is not None:  # applied when the batch commits (dropped if it does not)
            self._pending.extend(records)
            return
        self._w._applied([r for r in records if getattr(r, "run_id", None) == self._w.run_id])

    def append(self, run_id: str, topic: str, payload: dict[str, Any], **kw: Any) -> Any:
        with self._w.lock:
            self._w.guard()
            rec = self._l.append(run_id, topic, payload, **kw)
            self._apply([rec])
            return rec

    def revoke(self, *a: Any, **kw: Any) -> Any:
        with self._w.lock:
            self._w.guard()
            rec = self._l.revoke(*a, **kw)
            self._apply([rec])
            return rec

    @contextmanager
    def transaction(self) -> Iterator[_TxRecorder]:
        with self._w.lock:
            self._w.guard()
            records: list = []
            with self._l.transaction() as tx:
                recorder = _TxRecorder(tx, records)
                yield recorder
                recorder.flush()
            self._apply(records)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """The ledger's batch (one commit for several transactions) under the writer's lock:
        the records its transactions kept reach the run state after the commit, in order;
        none do if it does not commit."""
        with self._w.lock:
            if self._pending is not None or getattr(self._l, "_open", None) is not None:
                yield  # inside a batch or a transaction already: the body joins it
                return
            self._w.guard()
            self._pending = pending = []

            def committed() -> None:
                self._pending = None
                self._apply(pending)

            try:
                with self._l.batch(on_commit=committed):
                    yield
            finally:
                self._pending = None
