"""Whole-ledger verification (pure: rows in, report out).

Order of checks for each stored row, so each failure has one code:
1. sha256 of the stored record bytes equals the row's record_digest;
2. the signature (by the row's kid) verifies over DSSE PAE of those exact bytes;
3. the bytes parse as a JSON object with exactly the record keys and are in
   RFC 8785 canonical form (so no two byte strings mean the same record);
4. every structured column equals the value inside the bytes;
5. payload_digest is the digest of the canonical payload, and the payload
   column holds exactly those canonical bytes;
6. sequence follows the previous record of the run (1, 2, 3, ...) and
   prev_digest is the previous record's digest (null for the first);
7. the record carries the same `submitted_by` as the run's first record
   (both none, or the same client name).
Nothing is re-canonicalized before the digest and signature are checked.
"""
from __future__ import annotations

import base64
import binascii
import gc
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from registry.canonical import CANONICALIZATION, canonical_json, digest_bytes, sha256_hex
from registry.errors import DomeError
from registry.signing import Keyring

from .record import (PAYLOAD_TYPE, RECORD_KEYS, SCHEMA_VERSION, SUBMITTED_BY, check_submitter, loads_record,
                     submitter_of)

# Columns read for verification, in this order.
VERIFY_COLUMNS = ("id", "run_id", "sequence", "event_id", "ts", "topic", "wave_id", "node_id",
                  "node_execution_id", "task_id", "payload", "payload_digest", "canonicalization",
                  "schema_version", "prev_digest", "record_digest", "kid", "signature",
                  "record_bytes")
_ENVELOPE_COLUMNS = ("run_id", "sequence", "event_id", "ts", "topic", "wave_id", "node_id",
                     "node_execution_id", "task_id", "payload_digest", "canonicalization",
                     "schema_version", "prev_digest", "kid")
_KEYSET = frozenset(RECORD_KEYS)
_KEYSET_SUBMITTED = _KEYSET | {SUBMITTED_BY}  # a run a named client submitted


@dataclass(frozen=True)
class Problem:
    """One bad record: where it is and what is wrong with it."""

    code: str
    message: str
    run_id: str
    sequence: int | None
    event_id: str | None
    row_id: int | None
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "run_id": self.run_id,
                "sequence": self.sequence, "event_id": self.event_id, "row_id": self.row_id,
                "details": self.details}


@dataclass
class LedgerVerifyReport:
    runs: int = 0
    events: int = 0
    signed: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def first_bad(self) -> Problem | None:
        """The earliest bad record in storage order."""
        if not self.problems:
            return None
        return min(self.problems, key=lambda p: (p.row_id if p.row_id is not None else float("inf"),
                                                 p.sequence or 0))

    def to_json(self) -> dict[str, Any]:
        first = self.first_bad
        return {"ok": self.ok, "runs": self.runs, "events": self.events, "signed": self.signed,
                "first_bad": first.to_json() if first else None,
                "problems": [p.to_json() for p in self.problems]}


class _Bad(Exception):
    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code, self.message, self.details = code, message, details


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    # text in the blob column (a tamperer's rewrite) is not the record: the readers refuse it too
    raise _Bad("RECORD_MALFORMED", f"record bytes stored as {type(value).__name__}, not bytes")


def _check_signature(data: bytes, kid: Any, signature: Any, keyring: Keyring) -> None:
    if kid is None and signature is None:
        return
    if not isinstance(kid, str) or not isinstance(signature, str):
        raise _Bad("SIGNATURE_MISSING", "record has a kid without a signature or the reverse")
    try:
        raw = base64.b64decode(signature.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise _Bad("SIGNATURE_MALFORMED", "signature is not base64") from None
    if base64.b64encode(raw).decode("ascii") != signature:
        raise _Bad("SIGNATURE_MALFORMED", "signature is not in canonical base64")
    try:
        keyring.get(kid).verify_pae(PAYLOAD_TYPE, data, raw)
    except DomeError as exc:
        raise _Bad(exc.code, f"signature does not verify: {exc.message}", kid=kid) from None


def check_row(row: Sequence[Any], prev: tuple[int, str, str | None] | None,
              keyring: Keyring) -> tuple[int, str, str | None]:
    """Check one row (VERIFY_COLUMNS order) against its predecessor in the run;
    return (sequence, digest, the run's submitter) to chain the next one. Raises _Bad."""
    col = dict(zip(VERIFY_COLUMNS, row))
    data = _as_bytes(col["record_bytes"])
    digest = "sha256:" + sha256_hex(data)
    if col["record_digest"] != digest:
        raise _Bad("RECORD_DIGEST_MISMATCH", "stored record bytes do not hash to record_digest",
                   stored=col["record_digest"], computed=digest)
    _check_signature(data, col["kid"], col["signature"], keyring)
    try:
        env = loads_record(data)
    except (ValueError, UnicodeDecodeError):
        raise _Bad("RECORD_MALFORMED", "record bytes are not JSON") from None
    if not isinstance(env, dict) or (set(env) != _KEYSET and set(env) != _KEYSET_SUBMITTED):
        raise _Bad("RECORD_MALFORMED", "record bytes do not hold exactly the envelope keys")
    submitter = env.get(SUBMITTED_BY)
    try:
        check_submitter(submitter)
    except DomeError:
        raise _Bad("RECORD_MALFORMED", "submitted_by is not a client name") from None
    try:
        canonical = canonical_json(env)
    except DomeError:
        raise _Bad("RECORD_NOT_CANONICAL", "record bytes cannot be canonicalized") from None
    if canonical != data:
        raise _Bad("RECORD_NOT_CANONICAL", "record bytes are not in RFC 8785 canonical form")
    if env["kid"] is not None and col["signature"] is None:
        raise _Bad("SIGNATURE_MISSING", "record names a signing key but has no signature")
    for name in _ENVELOPE_COLUMNS:
        if col[name] != env[name] or type(col[name]) is not type(env[name]):
            raise _Bad("COLUMN_MISMATCH", f"column {name} does not match the signed record",
                       column=name)
    if env["canonicalization"] != CANONICALIZATION:
        raise _Bad("CANONICALIZATION_UNKNOWN", f"unknown canonicalization {env['canonicalization']!r}")
    if env["schema_version"] != SCHEMA_VERSION:
        raise _Bad("SCHEMA_VERSION_UNKNOWN", f"unknown schema_version {env['schema_version']!r}")
    payload = env["payload"]
    if not isinstance(payload, dict):
        raise _Bad("RECORD_MALFORMED", "payload is not an object")
    # The bytes are canonical (checked above), so the payload's canonical form is
    # the slice between the record's own "payload" and "payload_digest" keys:
    # keys before "payload" hold only strings/null and fields after
    # "payload_digest" only strings/integers/null, so first/last matches are exact.
    start = data.index(b',"payload":') + len(b',"payload":')
    pc = data[start:data.rindex(b',"payload_digest":')]
    if digest_bytes(pc) != env["payload_digest"]:
        raise _Bad("PAYLOAD_DIGEST_MISMATCH", "payload_digest is not the digest of the payload")
    stored_payload = col["payload"]
    if not isinstance(stored_payload, str) or stored_payload.encode("utf-8", "surrogatepass") != pc:
        raise _Bad("COLUMN_MISMATCH", "column payload does not match the signed record",
                   column="payload")
    expected_seq = 1 if prev is None else prev[0] + 1
    if env["sequence"] != expected_seq:
        raise _Bad("SEQUENCE_GAP", f"sequence {env['sequence']} follows {expected_seq - 1}",
                   expected=expected_seq)
    expected_prev = None if prev is None else prev[1]
    if env["prev_digest"] != expected_prev:
        raise _Bad("CHAIN_BROKEN", "prev_digest does not name the previous record",
                   expected=expected_prev, stored=env["prev_digest"])
    if prev is not None and submitter != prev[2]:
        raise _Bad("SUBMITTER_MISMATCH", "the record names another submitter than the run's first record",
                   expected=prev[2], stored=submitter)
    return env["sequence"], digest, submitter


def verify_run(run_id: str, rows: Iterable[Sequence[Any]], keyring: Keyring,
               report: LedgerVerifyReport) -> None:
    """Check one run's rows (ordered by sequence) into `report`."""
    was_gc = gc.isenabled()
    gc.disable()  # many short-lived objects, no cycles
    try:
        _verify_run(run_id, rows, keyring, report)
    finally:
        if was_gc:
            gc.enable()


def _verify_run(run_id: str, rows: Iterable[Sequence[Any]], keyring: Keyring,
                report: LedgerVerifyReport) -> None:
    report.runs += 1
    prev: tuple[int, str] | None = None
    for row in rows:
        report.events += 1
        col = dict(zip(VERIFY_COLUMNS, row))
        if col["signature"] is not None:
            report.signed += 1
        try:
            prev = check_row(row, prev, keyring)
        except _Bad as bad:
            report.problems.append(Problem(
                code=bad.code, message=bad.message, run_id=run_id,
                sequence=col["sequence"] if isinstance(col["sequence"], int) else None,
                event_id=col["event_id"] if isinstance(col["event_id"], str) else None,
                row_id=col["id"], details=bad.details))
            # Keep checking the rest of the run against what is stored, so one
            # bad record is reported once and later ones are still checked.
            try:
                seq = col["sequence"] if isinstance(col["sequence"], int) else (prev[0] + 1 if prev else 1)
                stored = col["record_digest"]
                prev = (seq, stored if isinstance(stored, str)
                        else "sha256:" + sha256_hex(_as_bytes(col["record_bytes"])),
                        prev[2] if prev else submitter_of(_as_bytes(col["record_bytes"])))
            except _Bad:
                prev = None
