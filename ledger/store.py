"""The Ledger: single-writer, append-only, hash-chained ControlEvent store.

I/O shell around the pure parts (ledger.record builds record bytes,
ledger.verify checks them). Every write goes through one transaction on the
writer connection (BEGIN IMMEDIATE on SQLite), so a run's sequence and chain
are read and extended under the database's write lock; the unique
(run_id, sequence) constraint refuses anything that slips past (other
dialects), and a caller's `expected_sequence` turns a lost race into a
SequenceConflict instead of an interleaved chain.
"""
from __future__ import annotations

import gc
import json
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from sqlalchemy import Connection, func, or_, select, text
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError

from registry.canonical import canonical_json
from registry.signing import Keyring, SigningKey


from . import crashpoint, lease
from .clock import new_event_ids, utc_now
from .driver_path import ROW_COLUMNS, driver_path
from .blobs import BlobStore
from .engine import Engines, default_url, make_engines
from .errors import (GrantReplayed, IdempotencyKeyReused, InvalidEvent, LedgerNotFound, LedgerUnavailable,
                     RecordUnreadable, SequenceConflict)
from .models import events, revocations
from .record import (EventDraft, EventRecord, build_batch, check_submitter, loads_record, make_record,
                     payload_bytes, submitter_of)
from .verify import VERIFY_COLUMNS, LedgerVerifyReport, verify_run

Clock = Callable[[], str]

@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector around allocation-heavy loops that
    create no reference cycles (building or reading thousands of records):
    otherwise its generation scans cost more than the work itself."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


_READ_COLUMNS = ("sequence", "event_id", "ts", "topic", "wave_id", "node_id", "node_execution_id",
                 "task_id", "payload", "payload_digest", "prev_digest", "canonicalization", "kid",
                 "signature", "record_bytes", "record_digest", "schema_version")
_SQLITE_READ = (f"SELECT {', '.join(_READ_COLUMNS)} FROM events WHERE run_id = ? AND sequence > ? "
                "ORDER BY sequence")
# The gateway's per-call statements, written once (named parameters: the driver paths take them,
# and so does SQLAlchemy's text() for other dialects).
_SQL_SPENT = "SELECT 1 FROM spent_grants WHERE jti = :jti LIMIT 1"
_SQL_SPEND = ("INSERT INTO spent_grants (jti, run_id, profile_id, spent_at) "
              "VALUES (:jti, :run_id, :profile_id, :spent_at)")
_SQL_REVOKED = "SELECT 1 FROM revocations WHERE jti = :jti OR profile_id = :profile_id LIMIT 1"
_SQL_IDEM_GET = ("SELECT result, request_digest FROM idempotency_records "
                 "WHERE run_id = :run_id AND method = :method AND idempotency_key = :key")
_SQL_IDEM_PUT = ("INSERT INTO idempotency_records (run_id, method, idempotency_key, request_digest, result, "
                 "created_at) VALUES (:run_id, :method, :key, :request_digest, :result, :created_at)")
_FIRST_RECORD = "SELECT record_bytes FROM events WHERE run_id = :r AND sequence = 1"
_TEXT: dict[str, Any] = {}
_UNREAD = object()  # a run whose submitter this ledger has not read yet


def _record_from_row(run_id: str, r: Sequence[Any]) -> EventRecord:
    if not isinstance(r[14], (bytes, memoryview)):  # rewritten outside dome (as TEXT, say)
        raise RecordUnreadable(f"run {run_id} sequence {r[0]}: the stored record bytes are "
                               f"{type(r[14]).__name__}, not bytes",
                               details={"run_id": run_id, "sequence": r[0], "event_id": r[1]},
                               hints=["dome ledger verify names every bad record"])
    return make_record(
        schema_version=r[16], sequence=r[0], event_id=r[1], ts=r[2], topic=r[3], run_id=run_id,
        wave_id=r[4], node_id=r[5], node_execution_id=r[6], task_id=r[7],
        payload=loads_record(r[8]), payload_digest=r[9], prev_digest=r[10],
        canonicalization=r[11], kid=r[12], signature=r[13], record_bytes=bytes(r[14]),
        record_digest=r[15])


class LedgerTransaction:
    """All-or-nothing unit of work on the ledger (see Ledger.transaction)."""

    def __init__(self, ledger: "Ledger", conn: Connection, *, heads: dict[str, tuple[int, str | None]] | None = None,
                 memo: dict[tuple[str | None, str | None], bool] | None = None) -> None:
        self._ledger = ledger
        self._conn = conn
        self._heads: dict[str, tuple[int, str | None]] = {} if heads is None else heads
        self._memo: dict[tuple[str | None, str | None], bool] = {} if memo is None else memo  # is_revoked answers
        self.topics: list[str] = []  # appended in this transaction (for the crash-test hook)
        self._depth = 0  # savepoints open in this transaction (SQLite names them by depth)
        self._absent: set[tuple[str, str, str]] = set()  # idempotency keys read absent and not written since
        self._fast = driver_path(conn)  # the hot statements on the driver (SQLite, psycopg), else None

    def _row(self, sql: str, params: dict[str, Any]) -> Sequence[Any] | None:
        """One row of a fixed statement (on the driver path, else through SQLAlchemy)."""
        if self._fast is not None:
            return self._fast.row(sql, params)
        stmt = _TEXT.get(sql)
        if stmt is None:
            stmt = _TEXT[sql] = text(sql)
        return self._conn.execute(stmt, params).first()

    def _exec(self, sql: str, params: dict[str, Any]) -> None:
        """Run a fixed statement that returns no rows."""
        if self._fast is not None:
            self._fast.execute(sql, params)
            return
        stmt = _TEXT.get(sql)
        if stmt is None:
            stmt = _TEXT[sql] = text(sql)
        self._conn.execute(stmt, params)

    # -- events ---------------------------------------------------------
    def head(self, run_id: str) -> tuple[int, str | None]:
        """(last sequence, its record digest) of a run; (0, None) when empty."""
        cached = self._heads.get(run_id)
        if cached is not None:
            return cached
        if self._fast is not None:
            row = self._fast.head(run_id)
        else:
            if self._conn.dialect.name == "postgresql":
                # serialize writers of one run (released at commit/rollback)
                self._conn.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:r, 0))"),
                                   {"r": "dome.ledger:" + run_id})
            row = self._conn.execute(
                select(events.c.sequence, events.c.record_digest)
                .where(events.c.run_id == run_id).order_by(events.c.sequence.desc()).limit(1)
            ).first()
        head = (0, None) if row is None else (int(row[0]), str(row[1]))
        self._heads[run_id] = head
        return head

    def append(self, run_id: str, topic: str, payload: dict[str, Any], *,
               wave_id: str | None = None, node_id: str | None = None,
               node_execution_id: str | None = None, task_id: str | None = None,
               signer: SigningKey | None = None,
               expected_sequence: int | None = None, payload_canonical: bytes | None = None) -> EventRecord:
        """One event in this transaction. `payload_canonical`: the payload's RFC 8785 bytes
        when the caller already holds them (they are stored as given, not encoded again)."""
        draft = EventDraft(topic=topic, payload=payload, wave_id=wave_id, node_id=node_id,
                           node_execution_id=node_execution_id, task_id=task_id)
        return self.append_batch(run_id, [draft], signer=signer, expected_sequence=expected_sequence,
                                 payloads=None if payload_canonical is None
                                 else [payload_bytes(payload, payload_canonical)])[0]

    def append_batch(self, run_id: str, drafts: Sequence[EventDraft], *,
                     signer: SigningKey | None = None, expected_sequence: int | None = None,
                     payloads: Sequence[bytes] | None = None,
                     signers: Sequence[SigningKey | None] | None = None) -> list[EventRecord]:
        """Consecutive events of one run in this transaction, one time stamp for all.
        `signers`: each draft's signer (or None), in place of one `signer` for all.
        `payloads`: each draft's RFC 8785 payload bytes, when the caller already made them
        (stored as given; their type and size are checked as for any payload)."""
        if not drafts:
            return []
        if payloads is None:
            payloads = [payload_bytes(d.payload) for d in drafts]
        elif len(payloads) != len(drafts):
            raise ValueError("append_batch: one payload's bytes per draft")
        else:
            payloads = [payload_bytes(d.payload, pc) for d, pc in zip(drafts, payloads)]
        seq, prev = self.head(run_id)
        if expected_sequence is not None and expected_sequence != seq:
            raise SequenceConflict(
                f"run {run_id!r} is at sequence {seq}, not {expected_sequence}",
                details={"run_id": run_id, "expected_sequence": expected_sequence,
                         "actual_sequence": seq},
                hints=["re-read the run's events, re-decide, and append again"])
        ts = self._ledger._clock()  # one commit, one time
        submitter = self._ledger._submitters.get(run_id, _UNREAD)
        if submitter is _UNREAD:  # a run this process did not start: its first record says
            submitter = self._ledger._submitters[run_id] = self._first_submitter(run_id) if seq else None
        with _no_cyclic_gc():
            records, rows = build_batch(run_id=run_id, drafts=drafts, payloads=payloads,
                                        first_sequence=seq + 1, prev_digest=prev, ts=ts,
                                        event_ids=self._ledger._new_ids(len(drafts)), signer=signer,
                                        signers=signers, submitted_by=submitter)
        seq, prev = records[-1].sequence, records[-1].record_digest
        try:
            if self._fast is not None:
                self._fast.insert_events(rows)
            else:
                self._conn.execute(events.insert(), [dict(zip(ROW_COLUMNS, r)) for r in rows])
        except (IntegrityError, sqlite3.IntegrityError) as exc:
            self._heads.pop(run_id, None)
            raise SequenceConflict(
                f"another writer appended to run {run_id!r} concurrently",
                details={"run_id": run_id}, hints=["retry the append"]) from exc
        self._heads[run_id] = (seq, prev)
        if self._ledger._crash is not None:
            self.topics.extend(d.topic for d in drafts)
        return records

    def _first_submitter(self, run_id: str) -> str | None:
        row = self._row(_FIRST_RECORD, {"r": run_id})
        return submitter_of(bytes(row[0])) if row is not None else None

    def last_payload(self, run_id: str, topics: Sequence[str], *, node_id: str | None = None) -> dict[str, Any] | None:
        """The payload of a run's latest event with one of these topics (and node), read
        inside this transaction: a decision taken on it (a budget) and the event that
        records the decision commit under the same write lock."""
        q = select(events.c.payload).where(events.c.run_id == run_id, events.c.topic.in_(list(topics)))
        if node_id is not None:
            q = q.where(events.c.node_id == node_id)
        row = self._conn.execute(q.order_by(events.c.sequence.desc()).limit(1)).first()
        return None if row is None else loads_record(row[0])

    # -- grants ---------------------------------------------------------
    def spend_jti(self, jti: str, run_id: str, profile_id: str | None = None) -> None:
        """Mark a grant id used; a second use raises GrantReplayed."""
        if not jti:
            raise InvalidEvent("jti must be a non-empty string")
        replay = GrantReplayed(f"grant {jti!r} was already used", details={"jti": jti},
                               hints=["a grant is single-use; ask the coordinator for a new one"])
        if self._row(_SQL_SPENT, {"jti": jti}) is not None:
            raise replay
        try:
            self._exec(_SQL_SPEND, {"jti": jti, "run_id": run_id, "profile_id": profile_id,
                                   "spent_at": self._ledger._clock()})
        except (IntegrityError, sqlite3.IntegrityError) as exc:
            raise replay from exc

    def is_spent(self, jti: str) -> bool:
        return self._row(_SQL_SPENT, {"jti": jti}) is not None

    def revoke(self, *, run_id: str, reason: str, jti: str | None = None,
               profile_id: str | None = None, signer: SigningKey | None = None) -> EventRecord:
        if not jti and not profile_id:
            raise InvalidEvent("revoke needs a jti or a profile_id")
        self._memo.clear()
        rec = self.append(run_id, "grant.revoked",
                          {"jti": jti, "profile_id": profile_id, "reason": reason}, signer=signer)
        self._conn.execute(revocations.insert(), {
            "jti": jti, "profile_id": profile_id, "run_id": run_id, "reason": reason,
            "revoked_at": rec.ts, "event_sequence": rec.sequence})
        return rec

    def is_revoked(self, jti: str | None = None, profile_id: str | None = None) -> bool:
        """Whether the jti or profile is revoked. Asked again in the same transaction (the calls
        of one gateway request), the answer is the first one's, until this transaction revokes."""
        if not jti and not profile_id:
            return False
        known = self._memo.get((jti, profile_id))
        if known is None:
            known = self._memo[(jti, profile_id)] = self._row(
                _SQL_REVOKED, {"jti": jti or None, "profile_id": profile_id or None}) is not None
        return known

    # -- idempotency ----------------------------------------------------
    def idempotency_get(self, run_id: str, method: str, key: str) -> dict[str, Any] | None:
        row = self._row(_SQL_IDEM_GET, {"run_id": run_id, "method": method, "key": key})
        if row is None:
            self._absent.add((run_id, method, key))
            return None
        return json.loads(row[0])

    def idempotency_put(self, run_id: str, method: str, key: str, result: dict[str, Any], *,
                        request_digest: str | None = None) -> dict[str, Any]:
        """Record the first result of (run_id, method, key) and return it. A
        duplicate returns the first result unchanged; with `request_digest`
        given on both calls, a different request under the same key raises
        IdempotencyKeyReused. A key this transaction has just read absent is not read again:
        a writer that got in between fails the insert on the table's primary key."""
        ident = (run_id, method, key)
        row = None if ident in self._absent else self._row(_SQL_IDEM_GET, {"run_id": run_id, "method": method,
                                                                             "key": key})
        self._absent.discard(ident)
        if row is not None:
            if request_digest and row[1] and row[1] != request_digest:
                raise IdempotencyKeyReused(
                    f"idempotency key {key!r} of {method} was used for a different request",
                    details={"run_id": run_id, "method": method, "idempotency_key": key},
                    hints=["use a new idempotency key for a new request"])
            return json.loads(row[0])
        self._exec(_SQL_IDEM_PUT, {
            "run_id": run_id, "method": method, "key": key,
            "request_digest": request_digest, "result": canonical_json(result).decode("utf-8"),
            "created_at": self._ledger._clock()})
        return result


@contextmanager
def _nested(outer: LedgerTransaction) -> Iterator[None]:
    """A savepoint in `outer`: released when the body returns, rolled back to when it raises.
    SQLite and PostgreSQL take the statements on the driver connection (SQLAlchemy's
    begin_nested costs more than the savepoint itself); other dialects get SQLAlchemy's."""
    raw = outer._fast
    if raw is None:
        with outer._conn.begin_nested():
            yield
        return
    outer._depth += 1
    name = f"dome_sp{outer._depth}"
    raw.execute(f"SAVEPOINT {name}")
    try:
        yield
    except BaseException:
        raw.execute(f"ROLLBACK TO SAVEPOINT {name}")
        raw.execute(f"RELEASE SAVEPOINT {name}")
        raise
    else:
        raw.execute(f"RELEASE SAVEPOINT {name}")
    finally:
        outer._depth -= 1


def _sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names; None for memory or a database server."""
    from sqlalchemy.engine import make_url
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") or "mode=memory" in url:
        return None
    return Path(database)


class Ledger:
    """Open with Ledger.open(db_url, ops_root). Thread-safe; one writer
    connection per Ledger, any number of processes (writes serialize)."""

    def __init__(self, engines: Engines, ops_root: Path, *, clock: Clock = utc_now,
                 new_ids: Callable[[int], list[str]] = new_event_ids) -> None:
        self.engines = engines
        self.url = engines.url
        self.ops_root = Path(ops_root)
        self.blobs = BlobStore(self.ops_root / "blobs")
        self._clock = clock
        self._new_ids = new_ids
        self._lock = threading.RLock()
        self._wconn: Connection | None = None
        self._open: LedgerTransaction | None = None  # the writer connection's open transaction (its thread holds _lock)
        self._crash = crashpoint.from_env()  # None unless a crash test asks for it
        # run -> the client that submitted it (None: no one named), as its records carry it
        self._submitters: dict[str, str | None] = {}

    @classmethod
    def open(cls, db_url: str | None = None, ops_root: Path | str = Path("ops"), *,
             clock: Clock = utc_now, migrate_schema: bool = True, must_exist: bool = False) -> "Ledger":
        """The ledger at `db_url` (default: sqlite:///OPS_ROOT/dome.db). With `must_exist`,
        a missing default file raises LedgerNotFound instead of creating an empty ledger."""
        ops_root = Path(ops_root)
        url = db_url or default_url(ops_root)
        where = _sqlite_file(url)
        if must_exist and where is not None and not where.is_file():  # --db naming a missing file too
            raise LedgerNotFound(f"no ledger at {where}", details={"path": str(where)},
                                 hints=["pass the --ops-root the run used (or --db / $DOME_DB)"])
        try:
            engines = make_engines(url)
            if migrate_schema:
                from . import migrate  # alembic is imported only when a schema may change
                migrate.upgrade(engines.write)
            else:  # opened as it is: a file that is not a dome ledger is refused here, not mid-read
                with engines.read.connect() as conn:
                    conn.execute(select(events.c.sequence).limit(1)).all()
        except SQLAlchemyError as exc:
            raise LedgerUnavailable(f"cannot open the ledger at {url}: {exc}",
                                    details={"url": url},
                                    hints=["check --db / --ops-root and file permissions"]) from exc
        return cls(engines, ops_root, clock=clock)

    def submitted_by(self, run_id: str, client: str) -> None:
        """Every record of the new run `run_id` carries `client` (given before its first record;
        a process that carries on an existing run takes the name from the run's first record)."""
        check_submitter(client)
        self._submitters[run_id] = client

    def close(self) -> None:
        with self._lock:
            if self._wconn is not None:
                self._wconn.close()
                self._wconn = None
            self.engines.dispose()

    def __enter__(self) -> "Ledger":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing --------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[LedgerTransaction]:
        """`with ledger.transaction() as tx:` -- everything inside commits
        together (durably) or not at all. Opened inside another transaction of
        this thread (a `batch`), it is a savepoint: it rolls back alone, and
        what it wrote commits with the enclosing transaction."""
        with self._lock:
            if self._open is not None:
                with self._savepoint(self._open) as tx:
                    yield tx
                return
            if self._wconn is None or self._wconn.closed:
                self._wconn = self.engines.write.connect()
            conn = self._wconn
            try:
                with conn.begin():
                    tx = self._open = LedgerTransaction(self, conn)
                    try:
                        yield tx
                    finally:
                        self._open = None
                if self._crash is not None:
                    self._crash.after_commit(tx.topics)
            except OperationalError:
                conn.close()
                self._wconn = None
                raise

    @contextmanager
    def _savepoint(self, outer: LedgerTransaction) -> Iterator[LedgerTransaction]:
        """A transaction nested in `outer`: its chain heads and topics join the outer's only if
        it is released; rolled back, it leaves the outer as it was."""
        tx = LedgerTransaction(self, outer._conn, heads=dict(outer._heads), memo=dict(outer._memo))
        tx._depth = outer._depth + 1  # savepoints opened in it are named below this one's
        with _nested(outer):
            self._open = tx
            try:
                yield tx
            finally:
                self._open = outer
        outer._heads.update(tx._heads)
        outer._memo.clear()
        outer._memo.update(tx._memo)
        outer.topics.extend(tx.topics)

    @contextmanager
    def batch(self, on_commit: Callable[[], None] | None = None) -> Iterator[None]:
        """One durable commit for several transactions (the calls of one gateway request):
        each `transaction()` opened inside is a savepoint that commits or rolls back alone,
        and whatever they kept commits once, at the end, even when the body raised (its
        error is raised after the commit). `on_commit` runs once the commit is durable.
        Inside another transaction, the body just joins it."""
        with self._lock:
            if self._open is not None:
                yield
                return
            failed: Exception | None = None
            with self.transaction():
                try:
                    yield
                except Exception as exc:  # noqa: BLE001 - what the savepoints kept commits; raised below
                    failed = exc
            if on_commit is not None:
                on_commit()
            if failed is not None:
                raise failed

    def append(self, run_id: str, topic: str, payload: dict[str, Any], *,
               wave_id: str | None = None, node_id: str | None = None,
               node_execution_id: str | None = None, task_id: str | None = None,
               signer: SigningKey | None = None,
               expected_sequence: int | None = None, payload_canonical: bytes | None = None) -> EventRecord:
        """Append one event durably. `expected_sequence` is the run's last
        sequence as the caller saw it (0 for a new run); if the run has moved
        on, SequenceConflict is raised and nothing is written. `payload_canonical`:
        the payload's RFC 8785 bytes, when the caller already holds them."""
        draft = EventDraft(topic=topic, payload=payload, wave_id=wave_id, node_id=node_id,
                           node_execution_id=node_execution_id, task_id=task_id)
        return self.append_batch(run_id, [draft], signer=signer, expected_sequence=expected_sequence,
                                 payloads=None if payload_canonical is None
                                 else [payload_bytes(payload, payload_canonical)])[0]

    def append_batch(self, run_id: str, drafts: Sequence[EventDraft],
                     signer: SigningKey | None = None, *,
                     expected_sequence: int | None = None,
                     payloads: Sequence[bytes] | None = None) -> list[EventRecord]:
        """Append several events in one durable transaction (all or none)."""
        payloads = payloads if payloads is not None else \
            [payload_bytes(d.payload) for d in drafts]  # outside the write lock
        attempts = 1 if expected_sequence is not None else 5
        for attempt in range(attempts):
            try:
                with self.transaction() as tx:
                    return tx.append_batch(run_id, drafts, signer=signer,
                                           expected_sequence=expected_sequence,
                                           payloads=payloads)
            except SequenceConflict:
                if attempt + 1 >= attempts:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def revoke(self, jti: str | None = None, profile_id: str | None = None, *, run_id: str,
               reason: str, signer: SigningKey | None = None) -> EventRecord:
        """Revoke a grant id and/or a profile id; appends `grant.revoked`."""
        with self.transaction() as tx:
            return tx.revoke(run_id=run_id, reason=reason, jti=jti, profile_id=profile_id,
                             signer=signer)

    # -- reading --------------------------------------------------------
    def is_revoked(self, jti: str | None = None, profile_id: str | None = None) -> bool:
        with self.engines.read.connect() as conn:
            return LedgerTransaction(self, conn).is_revoked(jti, profile_id)

    def idempotency_get(self, run_id: str, method: str, key: str) -> dict[str, Any] | None:
        with self.engines.read.connect() as conn:
            return LedgerTransaction(self, conn).idempotency_get(run_id, method, key)

    def events(self, run_id: str, since: int = 0, limit: int | None = None) -> list[EventRecord]:
        """A run's events with sequence > since, in sequence order."""
        cols = [events.c[name] for name in _READ_COLUMNS]
        q = (select(*cols).where(events.c.run_id == run_id, events.c.sequence > since)
             .order_by(events.c.sequence))
        if limit is not None:
            q = q.limit(limit)
        with self.engines.read.connect() as conn:
            if self.engines.dialect == "sqlite":
                sql = _SQLITE_READ + (f" LIMIT {int(limit)}" if limit is not None else "")
                rows = conn.connection.driver_connection.execute(sql, (run_id, since)).fetchall()
            else:
                rows = conn.execute(q).all()
        with _no_cyclic_gc():
            return [_record_from_row(run_id, r) for r in rows]

    def events_matching(self, run_id: str, since: int = 0, limit: int | None = None, *,
                        topics: Sequence[str] = (), prefixes: Sequence[str] = ()) -> list[EventRecord]:
        """`events`, only those whose topic is one of `topics` or starts with one of
        `prefixes` followed by a dot (say "integration"): the database leaves the
        others out, so a reader after a few topics never parses the run's other records."""
        conds = [events.c.topic.in_(list(topics))] if topics else []
        # equality of the first characters: exact under any collation (LIKE is not, in SQLite)
        conds += [func.substr(events.c.topic, 1, len(p) + 1) == f"{p}." for p in prefixes]
        if not conds:
            return []
        q = (select(*[events.c[name] for name in _READ_COLUMNS])
             .where(events.c.run_id == run_id, events.c.sequence > since, or_(*conds))
             .order_by(events.c.sequence))
        if limit is not None:
            q = q.limit(limit)
        with self.engines.read.connect() as conn:
            rows = conn.execute(q).all()
        with _no_cyclic_gc():
            return [_record_from_row(run_id, r) for r in rows]

    def head(self, run_id: str) -> int:
        """The run's last sequence (0 when it has no events)."""
        with self.engines.read.connect() as conn:
            value = conn.execute(select(func.max(events.c.sequence))
                                 .where(events.c.run_id == run_id)).scalar()
        return int(value or 0)

    def run_ids(self) -> list[str]:
        """Every run in the ledger, in the order they started."""
        with self.engines.read.connect() as conn:
            rows = conn.execute(select(events.c.run_id).group_by(events.c.run_id)
                                .order_by(func.min(events.c.id))).all()
        return [r[0] for r in rows]

    # -- run leases (ledger.lease) ---------------------------------------
    def lease_acquire(self, run_id: str, me: dict[str, Any], ttl_s: float) -> "lease.Lease":
        with self.transaction() as tx:
            return lease.acquire(tx._conn, run_id, me, ttl_s, time.time())

    def lease_renew(self, run_id: str, holder: str, ttl_s: float) -> bool:
        with self.transaction() as tx:
            return lease.renew(tx._conn, run_id, holder, ttl_s, time.time())

    def lease_release(self, run_id: str, holder: str) -> None:
        with self.transaction() as tx:
            lease.release(tx._conn, run_id, holder)

    def lease(self, run_id: str) -> "lease.Lease | None":
        with self.engines.read.connect() as conn:
            return lease.read(conn, run_id)

    def verify(self, keyring: Keyring | None = None) -> LedgerVerifyReport:
        """Check every stored byte of every run (see ledger.verify)."""
        keyring = keyring or Keyring()
        report = LedgerVerifyReport()
        cols = [events.c[name] for name in VERIFY_COLUMNS]
        with self.engines.read.connect() as conn, conn.begin():
            runs = [r[0] for r in conn.execute(select(events.c.run_id).group_by(events.c.run_id)
                                               .order_by(func.min(events.c.id)))]
            for run_id in runs:
                result = conn.execute(select(*cols).where(events.c.run_id == run_id)
                                      .order_by(events.c.sequence, events.c.id))
                verify_run(run_id, (tuple(r) for r in result), keyring, report)
        return report


__all__ = ["Ledger", "LedgerTransaction", "utc_now", "new_event_ids"]
