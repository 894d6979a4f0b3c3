"""The integration stage's ledger records: each artifact signed and appended
as it is produced (`Emitter`, which adopts what an interrupted pass already
recorded instead of recording it twice), read back (`records_of`, with
externalized artifacts loaded from the blob store), the git facts the gate
needs about the commits they name, and the run's folder of exported files.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ledger.blobs import BlobStore
from ledger.record import EventDraft
from ledger.paging import iter_events, sequence_of
from ledger.protocols import EventLog, EventSource
from registry.canonical import canonical_json
from registry.gitoid import is_git_oid
from registry.signing import SigningKey

from . import gitio
from .listchain import ListChainBroken, has_refs, is_ref, load_lists, store_lists
from .evidence import T_GATE, T_PLAN, T_PROMOTION, T_SELECTION, T_VALIDATION, GitFacts, Record, sign_artifact_canonical

PRODUCER = "dome-coordinator"
EXTERNALIZE_BYTES = 128 * 1024
"""Artifacts larger than this (canonical bytes) live in the blob store; the
ledger record keeps their digest, signature and `artifact_ref`."""

INTEGRATION_PREFIXES = ("integration", "gate", "promotion")
CHAINED_TOPICS = frozenset({T_PLAN, T_SELECTION, T_VALIDATION, T_GATE, T_PROMOTION})
"""The records whose lists name every proposal of the run (held as list chains
when long); the others list a batch at most, and stay as they are."""

BUFFERED = frozenset({"integration.proposal_verified", "integration.proposal_rejected",
                      "integration.checkpoint", "integration.apply_result", "integration.conflict_decision"})
"""The per-proposal records: the Emitter holds them and writes them in one ledger
transaction (one commit for many records, not one each). Nothing outside the
integration stage acts on them before the pass's next other record (which writes
the held ones first) or the end of the step that made them (`flush`); a kill
before that loses only steps a resumed pass works out again the same way."""
FLUSH_AT = 256


class Emitter:
    """Stamps the artifact header, signs, appends to the ledger.

    Given `replay` (the integration records a killed coordinator already
    wrote for this run), it re-walks them: a step whose record is already in
    the ledger is adopted (the recorded, signed artifact is returned and
    nothing is appended), so a resumed integration never records a step twice.
    The first step not found ends the replay; from there every step is new."""

    def __init__(self, ledger: EventLog, run_id: str, key: SigningKey, clock: Callable[[], str],
                 wave_id: str | None = None, replay: Sequence[Record] = ()) -> None:
        self.ledger, self.run_id, self.key, self.clock, self.wave_id = ledger, run_id, key, clock, wave_id
        self.count = 0
        self._replay = list(replay)
        self._cursor = 0
        self._held: list[tuple[str, dict[str, Any], bytes | None]] = []  # topic, payload, its bytes

    def recorded(self, topic: str, same: Callable[[Mapping[str, Any]], bool]) -> dict[str, Any] | None:
        """For a caller that can skip a step's work (a validation suite): the
        recorded artifact of the step, counted as emitted; or None (emit it)."""
        got = self._adopt(topic, same)
        if got is not None:
            self.count += 1  # object ids further on count the emitted steps
        return got

    def _adopt(self, topic: str, same: Callable[[Mapping[str, Any]], bool]) -> dict[str, Any] | None:
        """The recorded artifact of this step, or None (and the replay ends)."""
        for k in range(self._cursor, len(self._replay)):
            r = self._replay[k]
            if r.topic == topic and same(r.artifact):
                self._cursor = k + 1
                return dict(r.artifact)
        self._replay = []
        return None

    def __call__(self, topic: str, artifact: Mapping[str, Any]) -> dict[str, Any]:
        self.count += 1
        a = dict(artifact)
        a.setdefault("artifact_kind", "dome." + topic.split(".")[-1] + "/v1")
        a.setdefault("version", "1.0.0")
        a.setdefault("run_id", self.run_id)
        a.setdefault("created_at", self.clock())
        a.setdefault("producer", PRODUCER)
        a.setdefault("object_id", _object_id(a, self.count))
        if self._replay:
            got = self._adopt(topic, lambda rec: same_step(topic, rec, a))
            if got is not None:
                return got
        signed, signed_raw = sign_artifact_canonical(a, self.key)  # one encoding: signature and record
        payload: dict[str, Any] = signed
        raw: bytes | None = signed_raw
        blobs = blobs_of(self.ledger)
        if blobs is not None:
            # lists that grow with the run go to a chain of fixed-size chunks: the record stays
            # the same size whatever N (the signature covers the full lists; readers rebuild them)
            if topic in CHAINED_TOPICS:
                payload = store_lists(signed, blobs.put)
                raw = canonical_json(payload)
            if len(raw) > EXTERNALIZE_BYTES:
                # too big for one ledger record: the signed artifact goes to the
                # blob store, the record carries its digest and the signature
                payload = {k: signed[k] for k in ("artifact_kind", "version", "run_id", "object_id",
                                                  "created_at", "producer", "payload_digest",
                                                  "canonicalization", "kid", "signature")
                           if k in signed}
                payload["artifact_ref"] = blobs.put(signed_raw)
                raw = None
        elif payload is not signed:
            raw = None
        if topic in BUFFERED:
            self._held.append((topic, payload, raw))
            if len(self._held) >= FLUSH_AT:
                self.flush()
        else:
            self.flush()
            self._append(self.ledger.append, topic, payload, raw)
        return signed

    def _append(self, append: Callable[..., Any], topic: str, payload: dict[str, Any], raw: bytes | None) -> None:
        """One record; `raw`, when known, is the payload's canonical bytes (not encoded again)."""
        if raw is None:
            append(self.run_id, topic, payload, wave_id=self.wave_id, signer=self.key)
        else:
            append(self.run_id, topic, payload, wave_id=self.wave_id, signer=self.key, payload_canonical=raw)

    def flush(self) -> None:
        """Write the held records, in order, in one ledger transaction."""
        held, self._held = self._held, []
        if not held:
            return
        transaction = getattr(self.ledger, "transaction", None)
        if transaction is None or len(held) == 1:
            for topic, payload, raw in held:
                self._append(self.ledger.append, topic, payload, raw)
            return
        drafts = [EventDraft(topic=topic, payload=payload, wave_id=self.wave_id) for topic, payload, _ in held]
        with transaction() as tx:  # one batch of records: one head read, one time stamp, one insert
            tx.append_batch(self.run_id, drafts, signer=self.key,
                            payloads=[canonical_json(p) if raw is None else raw for _, p, raw in held])


ONE_PER_PASS = frozenset({T_GATE, T_PROMOTION})
"""Topics an integration pass records once (their ids count the ledger's records)."""
DECISIVE = ("head_ref", "tree", "applied", "action", "outcome", "proposal_id", "stack_plan_id")


def same_step(topic: str, recorded: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Is `recorded` the record of the step that just produced `new` (pure)?
    Every integration id is derived from content or position, and a pass is
    deterministic; the decisive fields guard against a step that went another way."""
    if topic in ONE_PER_PASS:
        return recorded.get("artifact_kind") == new.get("artifact_kind")
    return recorded.get("object_id") == new.get("object_id") and \
        all(recorded.get(k) == new.get(k) for k in DECISIVE if k in new)


def integration_records(ledger: EventSource, run_id: str) -> list[Record]:
    """What an earlier, interrupted integration pass of this run recorded."""
    return records_of(ledger, run_id, prefixes=INTEGRATION_PREFIXES)


def _object_id(a: Mapping[str, Any], n: int) -> str:
    for k in ("report_id", "decision_id", "stack_plan_id", "checkpoint_id"):
        if a.get(k):
            return str(a[k])
    kind = str(a.get("artifact_kind", "x")).split(".")[-1].split("/")[0]
    if a.get("proposal_id"):
        return f"{kind}:{a['proposal_id']}:{n}"
    return f"{kind}:{n}"


def blobs_of(ledger: EventSource) -> BlobStore | None:
    """The ledger's blob store, or None for a ledger that keeps no blobs."""
    return getattr(ledger, "blobs", None)


def run_dir(ops_root: Path, run_id: str) -> Path:
    return Path(ops_root) / "runs" / run_id


def write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(canonical_json(obj) + b"\n")
    tmp.replace(path)


def full_artifact(topic: str, payload: Any, store: BlobStore | None,
                  faults: list[tuple[str, ListChainBroken]] | None = None, where: str = "") -> Any:
    """A record's artifact as it was signed: an externalized artifact loaded from
    the blob store, chained lists rebuilt (only for the topics the Emitter chains:
    no other record's fields are read as chain references). A missing or changed
    blob leaves the stub, which fails its signature check downstream (a broken
    list chain leaves an empty list in its place, and is added to `faults` as
    `(where, error)`)."""
    if not isinstance(payload, Mapping) or store is None:
        return payload
    ref = payload.get("artifact_ref")
    if ref:
        try:
            full = json.loads(store.get(ref))
        except Exception:  # noqa: BLE001 - treated as tampering
            full = None
        if isinstance(full, dict) and full.get("payload_digest") == payload.get("payload_digest") \
                and full.get("signature") == payload.get("signature"):
            return full
        return payload
    if topic in CHAINED_TOPICS and has_refs(payload):
        try:
            return load_lists(payload, store.get)
        except ListChainBroken as exc:
            if faults is not None:
                faults.append((where, exc))
            # readers expect lists: the stub's are empty (so its signature fails, as a missing blob's does)
            return {k: ([] if is_ref(v) else v) for k, v in payload.items()}
    return payload


def readable_payload(topic: str, payload: Any, store: BlobStore | None) -> Any:
    """An event's payload for a reader of raw events (status, report): an
    integration record as it was signed (`full_artifact`), any other as it is."""
    if str(topic).split(".")[0] in INTEGRATION_PREFIXES:
        return full_artifact(topic, payload, store)
    return payload


def records_of(ledger: EventSource, run_id: str,
               faults: list[tuple[str, ListChainBroken]] | None = None, *,
               prefixes: Sequence[str] | None = None) -> list[Record]:
    """The run's records, with externalized artifacts and chained lists loaded
    from the blob store (`full_artifact`; broken chains are added to `faults`).
    With `prefixes` (say INTEGRATION_PREFIXES), only the records whose topic
    starts with one of them and a dot: the events are read a page at a time and
    the others left out by the database (`ledger.paging.iter_events`), so the
    run's thousands of worker and grant events are never read."""
    out = []
    store = blobs_of(ledger)
    keep = None if prefixes is None else frozenset(prefixes)
    for e in (iter_events(ledger, run_id) if keep is None else iter_events(ledger, run_id, prefixes=keep)):
        out.append(_loaded(e, store, faults))
    return out


def _loaded(e: Any, store: BlobStore | None, faults: list[tuple[str, ListChainBroken]] | None) -> Record:
    """An event as a Record whose artifact is the signed one (`full_artifact`)."""
    rec = Record.from_event(e)
    full = full_artifact(rec.topic, rec.artifact, store, faults, f"#{rec.sequence} {rec.topic}")
    return rec if full is rec.artifact else Record(rec.sequence, rec.topic, full)


class RunRecords:
    """A run's integration records (INTEGRATION_PREFIXES, loaded as `records_of` loads
    them) and its records of the `also` topics, kept current by reading only what was
    appended since the last read. A stage that needs the integration records at its
    start (a decision already taken, steps to adopt, derived bases) and again at its
    end (the gate) reads them once, and then only its own new ones; the database
    leaves the run's other events out (`ledger.paging.iter_events`)."""

    def __init__(self, ledger: EventSource, run_id: str, also: frozenset[str] = frozenset()) -> None:
        self.ledger, self.run_id, self.also = ledger, run_id, also
        self.integration: list[Record] = []
        self.other: list[Record] = []
        self.last = 0  # the sequence read up to
        self.refresh()

    def refresh(self) -> list[Record]:
        """Read the events appended since the last read; returns the integration records."""
        store = blobs_of(self.ledger)
        for e in iter_events(self.ledger, self.run_id, since=self.last, topics=self.also,
                             prefixes=INTEGRATION_PREFIXES):  # the database leaves the other topics out
            self.last = sequence_of(e)
            if _topic_of(e) in self.also:
                self.other.append(Record.from_event(e))
            else:
                self.integration.append(_loaded(e, store, None))
        return self.integration


def event_count(ledger: EventSource, run_id: str) -> int:
    """How many events the run holds (its sequences run 1, 2, ...): the ledger's
    head when it has one, else counted a page at a time."""
    head = getattr(ledger, "head", None)
    if callable(head):
        h = head(run_id)
        return int(h[0] if isinstance(h, tuple) else h)
    return sum(1 for _ in iter_events(ledger, run_id))


def _topic_of(ev: Any) -> str:
    return str(ev["topic"] if isinstance(ev, Mapping) else ev.topic)


def git_facts(repo: Path, records: Sequence[Record]) -> GitFacts:
    commits: set[str] = set()
    for r in records:
        for k in ("head_ref", "base_ref", "commit", "parent", "from_head_ref"):
            v = r.artifact.get(k)
            if is_git_oid(v):
                commits.add(str(v))
    with gitio.ObjectReader(repo) as reader:
        return GitFacts(commits=gitio.commit_facts(reader, sorted(commits)))


