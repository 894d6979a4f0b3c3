"""The ControlEvent record: what one ledger row holds, and how its exact bytes
are formed (pure functions, no I/O).

A record's bytes are the RFC 8785 canonical JSON of the envelope

    canonicalization, event_id, kid, node_execution_id, node_id, payload,
    payload_digest, prev_digest, run_id, schema_version, sequence, task_id,
    topic, ts, wave_id

and, on every record of a run submitted by a named client (the MCP front
door's `run_submit`), `submitted_by`, the client's name: the run's first
record fixes it and each later record of the run repeats it, so every record
names who asked for the run under the same digest and signature. A run
started any other way has no such key, and its bytes are as they always were.

The ledger stores those exact bytes (``record_bytes``). ``record_digest`` is
sha256 over them; the next record of the run names it as ``prev_digest``
(the first record of a run has ``prev_digest`` null), which makes each run a
hash chain. A signed record carries ``kid`` inside the bytes and an Ed25519
signature over DSSE PAE(PAYLOAD_TYPE, record_bytes) beside them, so a
signature cannot be stripped without changing the chain.
"""
from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from registry.canonical import CANONICALIZATION, canonical_json, sha256_hex
from registry.signing import SigningKey

from .errors import InvalidEvent, PayloadTooLarge

SCHEMA_VERSION = "dome.control_event/v1"  # registry/schemas/control_event.json (an artifact kind)
PAYLOAD_TYPE = "application/vnd.dome.controlevent+json"
#: Largest canonical payload the ledger accepts; bigger things go to the blob store.
MAX_PAYLOAD_BYTES = 256 * 1024

CORRELATION_KEYS = ("wave_id", "node_id", "node_execution_id", "task_id")
RECORD_KEYS = (
    "canonicalization", "event_id", "kid", "node_execution_id", "node_id", "payload",
    "payload_digest", "prev_digest", "run_id", "schema_version", "sequence", "task_id",
    "topic", "ts", "wave_id",
)
# registry/schemas/common.json identifier and control_event.json topic patterns
_IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,199}")
SUBMITTED_BY = "submitted_by"
# a client name as a record carries it: ASCII that RFC 8785 writes unescaped (the stdio door's
# `stdio:python3[4242]` too), so it is spliced into the bytes as it is
_SUBMITTER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+\[\]-]{0,199}")
_SUBMITTED_KEY = b',"submitted_by":"'
_PAYLOAD_DIGEST_AT = b',"payload_digest":"'


def check_submitter(value: Any) -> None:
    """InvalidEvent unless `value` is a client name a record may carry (or None: no submitter)."""
    if value is not None and (type(value) is not str or not _SUBMITTER.fullmatch(value)):
        raise InvalidEvent(f"submitted_by {value!r} is not a client name a record can carry",
                           details={"field": "submitted_by"},
                           hints=["1-200 of letters, digits and . _ : @ / + - [ ], starting with a letter or digit"])


def submitter_of(data: bytes) -> str | None:
    """The `submitted_by` a record's bytes carry, or None. Only scalars follow the payload, so the
    key is looked for after the last `"payload_digest"` (a payload may hold either key itself)."""
    tail = data[data.rfind(_PAYLOAD_DIGEST_AT):]
    i = tail.find(_SUBMITTED_KEY)
    if i < 0:
        return None
    start = i + len(_SUBMITTED_KEY)
    return tail[start:tail.index(b'"', start)].decode("ascii")


def _submitted_part(submitted_by: str | None) -> str:
    return "" if submitted_by is None else f'"submitted_by":"{submitted_by}",'

_TOPIC = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")


@dataclass(frozen=True)
class EventDraft:
    """One event to append (the ledger assigns sequence, id, time and chain)."""

    topic: str
    payload: dict[str, Any]
    wave_id: str | None = None
    node_id: str | None = None
    node_execution_id: str | None = None
    task_id: str | None = None


@dataclass(frozen=True)
class EventRecord:
    """One stored ControlEvent, exactly as the ledger holds it."""

    schema_version: str
    sequence: int
    event_id: str
    ts: str
    topic: str
    run_id: str
    wave_id: str | None
    node_id: str | None
    node_execution_id: str | None
    task_id: str | None
    payload: dict[str, Any]
    payload_digest: str
    prev_digest: str | None
    canonicalization: str
    kid: str | None
    signature: str | None
    record_bytes: bytes = field(repr=False)
    record_digest: str = ""

    @property
    def submitted_by(self) -> str | None:
        """The client that submitted the record's run, when one did (read from the signed bytes)."""
        return submitter_of(self.record_bytes)

    def envelope(self) -> dict[str, Any]:
        """The signed fields as a dict (what record_bytes encode)."""
        out = {k: getattr(self, k) for k in RECORD_KEYS}
        submitted_by = self.submitted_by
        if submitted_by is not None:
            out[SUBMITTED_BY] = submitted_by
        return out

    def to_json(self) -> dict[str, Any]:
        """The export form: the envelope, its digest and signature, and the
        exact bytes as a DSSE envelope so a third party can check them as is."""
        out = self.envelope()
        out["record_digest"] = self.record_digest
        out["signature"] = self.signature
        dsse: dict[str, Any] = {"payloadType": PAYLOAD_TYPE,
                                "payload": base64.b64encode(self.record_bytes).decode("ascii"),
                                "signatures": []}
        if self.kid and self.signature:
            dsse["signatures"].append({"keyid": self.kid, "sig": self.signature})
        out["dsse"] = dsse
        return out


def payload_bytes(payload: Any, canonical: bytes | None = None) -> bytes:
    """Canonical payload bytes, refusing non-objects and oversize payloads.
    `canonical`: the payload's RFC 8785 bytes, when the caller has just made
    them (a signed artifact, a grant): used as they are, not encoded again."""
    if type(payload) is not dict:
        raise InvalidEvent("an event payload is a JSON object",
                           details={"type": type(payload).__name__})
    data = canonical_json(payload) if canonical is None else canonical
    if len(data) > MAX_PAYLOAD_BYTES:
        raise PayloadTooLarge(
            f"event payload is {len(data)} bytes; the ledger takes at most {MAX_PAYLOAD_BYTES}",
            details={"size": len(data), "limit": MAX_PAYLOAD_BYTES},
            hints=["put large content (diffs, logs, images) in the blob store "
                   "(ledger.blobs.BlobStore.put) and put its sha256 digest in the payload"],
        )
    return data


_VALID_IDS: dict[str, bool] = {}
_VALID_TOPICS: dict[str, bool] = {}


def _check_id(name: str, value: Any) -> None:
    if value is None or _VALID_IDS.get(value) is True:
        return
    if type(value) is not str or not _IDENTIFIER.fullmatch(value):
        raise InvalidEvent(f"{name} {value!r} is not an identifier", details={"field": name},
                           hints=["ids are 1-200 of letters, digits and . _ : @ / + -, "
                                  "starting with a letter or digit"])
    if len(_VALID_IDS) > 100_000:
        _VALID_IDS.clear()
    _VALID_IDS[value] = True


_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_KID = re.compile(r"ed25519:[0-9a-f]{32}")
_LAST_TS: list[str] = [""]
_VALID_KIDS: dict[str, bool] = {}
# digests this module computed itself (the last few), which need no re-check
_VALID_DIGESTS: dict[str, bool] = {}


def _check(name: str, value: Any, pattern: re.Pattern[str], optional: bool = False) -> None:
    if value is None and optional:
        return
    if type(value) is not str or not pattern.fullmatch(value):
        raise InvalidEvent(f"{name} {value!r} is not well-formed", details={"field": name})


def seal(*, run_id: str, sequence: int, event_id: str, ts: str, topic: str,
         payload_canonical: bytes, payload_digest: str, prev_digest: str | None,
         wave_id: str | None = None, node_id: str | None = None,
         node_execution_id: str | None = None, task_id: str | None = None,
         kid: str | None = None, submitted_by: str | None = None) -> bytes:
    """The exact record bytes (RFC 8785) for these fields.

    Every field but the payload is checked against its schema pattern
    (identifiers, topic, timestamp, digests, kid): those patterns admit only
    ASCII characters that RFC 8785 writes unescaped, so the envelope is
    formatted directly, keys in sorted order, and the canonical payload is
    spliced in as given (encoded once per event)."""
    if run_id is None:
        raise InvalidEvent("run_id is required")
    _check_id("run_id", run_id)
    _check_id("wave_id", wave_id)
    _check_id("node_id", node_id)
    _check_id("node_execution_id", node_execution_id)
    _check_id("task_id", task_id)
    if type(event_id) is not str or not _IDENTIFIER.fullmatch(event_id):
        raise InvalidEvent(f"event_id {event_id!r} is not an identifier", details={"field": "event_id"})
    if _VALID_TOPICS.get(topic) is not True:
        if type(topic) is not str or not _TOPIC.fullmatch(topic):
            raise InvalidEvent(f"topic {topic!r} is not a dotted lowercase name such as task.progress",
                               details={"field": "topic"})
        if len(_VALID_TOPICS) < 10_000:
            _VALID_TOPICS[topic] = True
    if type(sequence) is not int or sequence < 1:
        raise InvalidEvent("sequence must be a positive integer")
    if ts is not _LAST_TS[0]:
        _check("ts", ts, _TIMESTAMP)
        _LAST_TS[0] = ts
    if _VALID_DIGESTS.get(payload_digest) is not True:
        _check("payload_digest", payload_digest, _DIGEST)
    if prev_digest is not None and _VALID_DIGESTS.get(prev_digest) is not True:
        _check("prev_digest", prev_digest, _DIGEST)
    if kid is not None and _VALID_KIDS.get(kid) is not True:
        _check("kid", kid, _KID)
        _VALID_KIDS[kid] = True
    check_submitter(submitted_by)
    q = lambda v: "null" if v is None else f'"{v}"'  # noqa: E731 - values are checked ASCII
    head = (f'{{"canonicalization":"{CANONICALIZATION}","event_id":"{event_id}",'
            f'"kid":{q(kid)},"node_execution_id":{q(node_execution_id)},"node_id":{q(node_id)},'
            f'"payload":')
    tail = (f',"payload_digest":"{payload_digest}","prev_digest":{q(prev_digest)},'
            f'"run_id":"{run_id}","schema_version":"{SCHEMA_VERSION}","sequence":{sequence},'
            f'{_submitted_part(submitted_by)}'
            f'"task_id":{q(task_id)},"topic":"{topic}","ts":"{ts}","wave_id":{q(wave_id)}}}')
    return b"".join((head.encode("ascii"), payload_canonical, tail.encode("ascii")))


def record_digest(data: bytes) -> str:
    return "sha256:" + sha256_hex(data)


def sign_record(data: bytes, signer: SigningKey) -> str:
    """Base64 Ed25519 signature over DSSE PAE(PAYLOAD_TYPE, record bytes)."""
    return base64.b64encode(signer.sign_pae(PAYLOAD_TYPE, data)).decode("ascii")


def build(*, run_id: str, sequence: int, event_id: str, ts: str, draft: EventDraft,
          prev_digest: str | None, signer: SigningKey | None,
          payload_canonical: bytes | None = None, submitted_by: str | None = None) -> EventRecord:
    """A complete record for `draft` at `sequence` (pure apart from signing)."""
    pc = payload_canonical if payload_canonical is not None else payload_bytes(draft.payload)
    pd = "sha256:" + sha256_hex(pc)
    if len(_VALID_DIGESTS) > 64:
        _VALID_DIGESTS.clear()
    _VALID_DIGESTS[pd] = True
    kid = signer.kid if signer is not None else None
    data = seal(run_id=run_id, sequence=sequence, event_id=event_id, ts=ts, topic=draft.topic,
                payload_canonical=pc, payload_digest=pd, prev_digest=prev_digest,
                wave_id=draft.wave_id, node_id=draft.node_id,
                node_execution_id=draft.node_execution_id, task_id=draft.task_id, kid=kid,
                submitted_by=submitted_by)
    return make_record(
        schema_version=SCHEMA_VERSION, sequence=sequence, event_id=event_id, ts=ts,
        topic=draft.topic, run_id=run_id, wave_id=draft.wave_id, node_id=draft.node_id,
        node_execution_id=draft.node_execution_id, task_id=draft.task_id,
        payload=draft.payload, payload_digest=pd, prev_digest=prev_digest,
        canonicalization=CANONICALIZATION, kid=kid,
        signature=sign_record(data, signer) if signer is not None else None,
        record_bytes=data, record_digest=_remember("sha256:" + sha256_hex(data)),
    )


def _remember(digest: str) -> str:
    _VALID_DIGESTS[digest] = True  # the next record's prev_digest
    return digest


def make_record(**fields: Any) -> EventRecord:
    """Construct an EventRecord without the frozen-dataclass __init__ cost
    (hot paths: append and read). Every field must be given."""
    rec = object.__new__(EventRecord)
    rec.__dict__.update(fields)
    return rec


def build_batch(*, run_id: str, drafts: Sequence[EventDraft], payloads: Sequence[bytes],
                first_sequence: int, prev_digest: str | None, ts: str, event_ids: Sequence[str],
                signer: SigningKey | None,
                signers: Sequence[SigningKey | None] | None = None,
                submitted_by: str | None = None) -> tuple[list[EventRecord], list[tuple]]:
    """Records for consecutive drafts (the append hot path) and their storage
    rows (ROW_COLUMNS order). Same bytes as `build` for each event; the fields
    shared by the batch (run_id, ts, kid) are checked once. `signers`, when
    given, names each draft's signer (None: unsigned) in place of `signer`. `submitted_by`: the
    run's submitter, carried by every record of the batch (None: the key is left out)."""
    if run_id is None:
        raise InvalidEvent("run_id is required")
    _check_id("run_id", run_id)
    check_submitter(submitted_by)
    _check("ts", ts, _TIMESTAMP)
    if prev_digest is not None:
        _check("prev_digest", prev_digest, _DIGEST)
    if signers is None:
        signers = (signer,) * len(drafts)
    elif len(signers) != len(drafts):
        raise ValueError("build_batch: one signer (or None) per draft")
    q = lambda v: "null" if v is None else f'"{v}"'  # noqa: E731 - values are checked ASCII
    kid_parts: dict[Any, tuple[str | None, str]] = {}  # signer -> (kid, its part of the envelope)
    for sg in signers:
        if sg not in kid_parts:
            kid = sg.kid if sg is not None else None
            if kid is not None:
                _check("kid", kid, _KID)
            kid_parts[sg] = (kid, f'","kid":{q(kid)},"node_execution_id":')
    head0 = f'{{"canonicalization":"{CANONICALIZATION}","event_id":"'
    tail_mid = f'","prev_digest":'
    tail_run = f',"run_id":"{run_id}","schema_version":"{SCHEMA_VERSION}","sequence":'
    task_part = f',{_submitted_part(submitted_by)}"task_id":'
    ts_part = f',"ts":"{ts}","wave_id":'
    valid_ids, valid_topics, ident, sha = _VALID_IDS, _VALID_TOPICS, _IDENTIFIER.fullmatch, hashlib.sha256
    new = object.__new__
    records: list[EventRecord] = []
    rows: list[tuple] = []
    seq = first_sequence - 1
    for d, pc, event_id, signer in zip(drafts, payloads, event_ids, signers):
        seq += 1
        kid, kid_part = kid_parts[signer]
        topic, wave_id, node_id, neid, task_id = d.topic, d.wave_id, d.node_id, d.node_execution_id, d.task_id
        if valid_topics.get(topic) is not True:
            seal_check_topic(topic)
        for name, value in (("wave_id", wave_id), ("node_id", node_id),
                            ("node_execution_id", neid), ("task_id", task_id)):
            if value is not None and valid_ids.get(value) is not True:
                _check_id(name, value)
        if type(event_id) is not str or not ident(event_id):
            raise InvalidEvent(f"event_id {event_id!r} is not an identifier", details={"field": "event_id"})
        pd = "sha256:" + sha(pc).hexdigest()
        data = b"".join((
            (f'{head0}{event_id}{kid_part}{q(neid)},"node_id":{q(node_id)},"payload":').encode("ascii"),
            pc,
            (f',"payload_digest":"{pd}{tail_mid}{q(prev_digest)}{tail_run}{seq}'
             f'{task_part}{q(task_id)},"topic":"{topic}"{ts_part}{q(wave_id)}}}').encode("ascii"),
        ))
        rd = "sha256:" + sha(data).hexdigest()
        sig = sign_record(data, signer) if signer is not None else None
        rec = new(EventRecord)
        rec.__dict__.update(
            schema_version=SCHEMA_VERSION, sequence=seq, event_id=event_id, ts=ts, topic=topic,
            run_id=run_id, wave_id=wave_id, node_id=node_id, node_execution_id=neid,
            task_id=task_id, payload=d.payload, payload_digest=pd, prev_digest=prev_digest,
            canonicalization=CANONICALIZATION, kid=kid, signature=sig, record_bytes=data,
            record_digest=rd)
        records.append(rec)
        rows.append((run_id, seq, event_id, ts, topic, wave_id, node_id, neid, task_id,
                     pc.decode("utf-8"), pd, CANONICALIZATION, SCHEMA_VERSION, prev_digest, rd, kid,
                     sig, data))
        prev_digest = rd
    return records, rows


def seal_check_topic(topic: Any) -> None:
    if type(topic) is not str or not _TOPIC.fullmatch(topic):
        raise InvalidEvent(f"topic {topic!r} is not a dotted lowercase name such as task.progress",
                           details={"field": "topic"})
    if len(_VALID_TOPICS) < 10_000:
        _VALID_TOPICS[topic] = True


_SAFE_INT = 2**53 - 1


def _parse_int(text: str) -> int | float:
    # RFC 8785 writes a float such as 2.0**60 as integer digits; read those
    # back as the float they were, so canonicalizing again gives the same bytes.
    value = int(text)
    return value if -_SAFE_INT <= value <= _SAFE_INT else float(value)


_BIG_INT_DECODER = json.JSONDecoder(parse_int=_parse_int)


def loads_record(data: bytes | str) -> Any:
    """Parse stored record or payload text (integers beyond +/-(2**53-1)
    become floats). The C scanner hands each integer's digits to `_parse_int`:
    a record holds few integers, and that costs less than searching the text
    for long digit runs first (hex digests are full of them)."""
    return _BIG_INT_DECODER.decode(data if type(data) is str else data.decode("utf-8"))


def from_record_bytes(data: bytes, *, signature: str | None, digest: str | None = None) -> EventRecord:
    """Rebuild an EventRecord from stored bytes (used by readers; verification
    has its own stricter path in ledger.verify)."""
    env = loads_record(data)
    return EventRecord(
        schema_version=env["schema_version"], sequence=env["sequence"], event_id=env["event_id"],
        ts=env["ts"], topic=env["topic"], run_id=env["run_id"], wave_id=env["wave_id"],
        node_id=env["node_id"], node_execution_id=env["node_execution_id"],
        task_id=env["task_id"], payload=env["payload"], payload_digest=env["payload_digest"],
        prev_digest=env["prev_digest"], canonicalization=env["canonicalization"],
        kid=env["kid"], signature=signature, record_bytes=data,
        record_digest=digest or record_digest(data),
    )


__all__ = ["EventDraft", "EventRecord", "PAYLOAD_TYPE", "SCHEMA_VERSION", "MAX_PAYLOAD_BYTES",
           "RECORD_KEYS", "CORRELATION_KEYS", "build", "seal", "payload_bytes", "record_digest",
           "sign_record", "from_record_bytes", "loads_record", "make_record", "build_batch", "SUBMITTED_BY",
           "check_submitter", "submitter_of"]
