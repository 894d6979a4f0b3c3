"""Mirror the ledger to files: OPS_ROOT/runs/<run_id>/events/event.<sequence>.json.

The files are a projection: if they disagree with the ledger, the ledger
wins and `export_run` rewrites them. Each file is the record's export form
(EventRecord.to_json(): the envelope fields, record_digest, signature, and a
DSSE envelope with the exact record bytes so a third party can check them
without re-serializing anything). Each file is compact JSON with sorted keys. A new file is written in place, created
exclusively (a torn write is a file whose bytes differ, which the next export
rewrites and `dome verify` reports as EXPORT_DIFFERS, never as a record);
a file that differs from the ledger is replaced atomically (temp file +
rename). A new file costs one exclusive create and one write: no folder
listing, no stat. The payload, the bulk of each file, is copied from the
record's own bytes rather than encoded again (`render`).
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

from registry.canonical import stdlib_form_is_canonical

from .paging import iter_events
from .record import PAYLOAD_TYPE, EventRecord


def run_dir_name(run_id: str) -> str:
    """A run id as one path segment (ids may contain '/')."""
    return run_id.replace("%", "%25").replace("/", "%2F")


def events_dir(ops_root: Path | str, run_id: str) -> Path:
    return Path(ops_root) / "runs" / run_dir_name(run_id) / "events"


def event_path(ops_root: Path | str, run_id: str, sequence: int) -> Path:
    return events_dir(ops_root, run_id) / f"event.{sequence}.json"


def render_generic(rec: EventRecord) -> bytes:
    """The export file's bytes, from the record's fields: compact JSON with sorted
    keys (what `render` gives, by the long way; kept as the reference)."""
    return (json.dumps(rec.to_json(), sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n"
            ).encode("utf-8")


_encode_str = json.encoder.encode_basestring  # the C encoder's string form (ensure_ascii=False)
_PAYLOAD_TYPE_JSON = _encode_str(PAYLOAD_TYPE)
_PAYLOAD_KEY = b',"payload":'
_PAYLOAD_DIGEST_KEY = b',"payload_digest":'


class _Generic(Exception):
    """This record's file needs the generic renderer."""


def _scalar(v: Any) -> str:
    if v is None:
        return "null"
    t = type(v)
    if t is str:
        return _encode_str(v)
    if t is int:
        return int.__repr__(v)
    raise _Generic


def _payload_text(rec: EventRecord) -> bytes:
    """The payload's bytes as the generic renderer would write them, cut out of
    the record's own bytes (no re-encoding), or _Generic.

    The record bytes are RFC 8785 (compact, sorted keys); for the values
    `stdlib_form_is_canonical` accepts, that is exactly the
    stdlib encoder's output for the parsed payload, and only the escape of a
    lone surrogate (\\udXXX) differs. The cut is the payload whose digest the
    record carries: anything else (a record that is not what its fields say)
    goes the generic way."""
    rb = rec.record_bytes
    i = rb.find(_PAYLOAD_KEY)  # the first: only scalars precede the payload, and `,"` is never inside a string
    j = rb.rfind(_PAYLOAD_DIGEST_KEY)  # the last: only scalars follow it
    if i < 0 or j <= i:
        raise _Generic
    body = rb[i + len(_PAYLOAD_KEY):j]
    if body[:1] != b"{" or b"\\ud" in body or b"\\uD" in body:
        raise _Generic
    if "sha256:" + hashlib.sha256(body).hexdigest() != rec.payload_digest:
        raise _Generic
    if not stdlib_form_is_canonical(rec.payload):
        raise _Generic  # say an integral float, which the stdlib writes as 2.0
    return body


def _render_spliced(rec: EventRecord) -> bytes:
    body = _payload_text(rec)
    kid, sig = rec.kid, rec.signature
    sigs = f'[{{"keyid":{_scalar(kid)},"sig":{_scalar(sig)}}}]' if kid and sig else "[]"
    by = rec.submitted_by
    submitted = "" if by is None else f'"submitted_by":{_scalar(by)},'
    head = (f'{{"canonicalization":{_scalar(rec.canonicalization)},"dsse":{{"payload":"'
            f'{base64.b64encode(rec.record_bytes).decode("ascii")}","payloadType":{_PAYLOAD_TYPE_JSON},'
            f'"signatures":{sigs}}},"event_id":{_scalar(rec.event_id)},"kid":{_scalar(kid)},'
            f'"node_execution_id":{_scalar(rec.node_execution_id)},"node_id":{_scalar(rec.node_id)},"payload":')
    tail = (f',"payload_digest":{_scalar(rec.payload_digest)},"prev_digest":{_scalar(rec.prev_digest)},'
            f'"record_digest":{_scalar(rec.record_digest)},"run_id":{_scalar(rec.run_id)},'
            f'"schema_version":{_scalar(rec.schema_version)},"sequence":{_scalar(rec.sequence)},'
            f'"signature":{_scalar(sig)},{submitted}"task_id":{_scalar(rec.task_id)},"topic":{_scalar(rec.topic)},'
            f'"ts":{_scalar(rec.ts)},"wave_id":{_scalar(rec.wave_id)}}}\n')
    return b"".join((head.encode("utf-8"), body, tail.encode("utf-8")))


def render(rec: EventRecord) -> bytes:
    """The bytes of the record's export file (the same bytes as `render_generic`):
    the envelope's short fields are formatted directly and the payload, the
    bulk of a record, is copied from the record's bytes instead of being
    encoded again, when that gives the same bytes (see `_payload_text`)."""
    try:
        return _render_spliced(rec)
    except _Generic:
        return render_generic(rec)


def _write_new(path: Path | str, data: bytes) -> None:
    """Create `path` holding `data` (one open, one write). FileExistsError when it
    exists already, FileNotFoundError when its folder does not."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _write_atomic(path: Path | str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def put_file(path: Path | str, data: bytes) -> bool:
    """Make `path` hold exactly `data`, creating its folder if need be; True when
    it was written. A new file costs one exclusive create and one write (no
    listing, no stat); an existing one is read and replaced only when its bytes
    differ."""
    try:
        try:
            _write_new(path, data)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            _write_new(path, data)
        return True
    except FileExistsError:
        pass
    try:
        with open(path, "rb") as fh:
            if fh.read() == data:
                return False
    except FileNotFoundError:
        pass
    _write_atomic(path, data)
    return True


class _FileWriter:
    """Writes records' files; a file that already holds the same bytes is left alone."""

    def __init__(self, ops_root: Path | str) -> None:
        self.ops_root = ops_root
        self.prefix: dict[str, str] = {}  # run id -> "<events dir>/event."

    def __call__(self, rec: EventRecord) -> str | None:
        """The path written, or None when the file already held these bytes."""
        prefix = self.prefix.get(rec.run_id)
        if prefix is None:
            prefix = self.prefix[rec.run_id] = os.path.join(events_dir(self.ops_root, rec.run_id), "event.")
        path = f"{prefix}{rec.sequence}.json"
        return path if put_file(path, render(rec)) else None


def export_records(records: Iterable[EventRecord], ops_root: Path | str) -> list[Path]:
    """Write these records' files (what the run loop calls after appending);
    a file that already holds the same bytes is left alone."""
    write = _FileWriter(ops_root)
    return [Path(p) for p in map(write, records) if p is not None]


def _remove_strays(root: Path, run_id: str, keep: set[int]) -> None:
    d = events_dir(root, run_id)
    try:
        names = os.listdir(d)
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        if name.startswith("event.") and name.endswith(".json"):
            middle = name[len("event."):-len(".json")]
            if not (middle.isdigit() and str(int(middle)) == middle and int(middle) in keep):
                os.unlink(os.path.join(d, name))


def export_stream(records: Iterable[EventRecord], run_id: str, ops_root: Path | str,
                  written: list[Path] | None = None) -> Iterator[EventRecord]:
    """Re-export a run while its records stream past: each record's file is
    written (and its path added to `written` when the bytes changed), then the
    record is yielded on, to a caller that reads the run for something else
    in the same pass. Once the stream is used up, the event files it did not
    hold are removed, as `export_run` does."""
    root = Path(ops_root)
    write = _FileWriter(root)
    keep: set[int] = set()
    for rec in records:
        path = write(rec)
        if path is not None and written is not None:
            written.append(Path(path))
        keep.add(rec.sequence)
        yield rec
    _remove_strays(root, run_id, keep)


def export_run(ledger, run_id: str, ops_root: Path | str | None = None,
               records: Iterable[EventRecord] | None = None) -> list[Path]:
    """Re-export a whole run from the ledger (ledger wins): rewrites files
    that differ and removes event files the ledger does not have. `records`:
    the run's events, when the caller has just read them; else they are read
    a page at a time."""
    root = Path(ops_root) if ops_root is not None else ledger.ops_root
    written: list[Path] = []
    for _ in export_stream(iter_events(ledger, run_id) if records is None else records, run_id, root, written):
        pass
    return written


def exported_sequences(ops_root: Path | str, run_id: str) -> list[int]:
    d = events_dir(ops_root, run_id)
    out = []
    if d.is_dir():
        for f in d.glob("event.*.json"):
            middle = f.name[len("event."):-len(".json")]
            if middle.isdigit():
                out.append(int(middle))
    return sorted(out)


def _exported_bytes(path: Path) -> bytes | None:
    import base64
    import binascii
    try:
        data = json.loads(path.read_bytes())
        return base64.b64decode(data["dsse"]["payload"], validate=True)
    except (OSError, ValueError, KeyError, TypeError, binascii.Error):
        return None


def check_against_exports(ledger, ops_root: Path | str | None = None):
    """Cross-check the ledger against its exported copies, which the run loop
    writes as it appends: the one thing a hash chain alone cannot show is that
    records were cut off the end of a run. Returns (problems, warnings):

    - LEDGER_TRUNCATED (problem): the export holds the run's next record --
      its exact bytes chain onto the ledger's last record -- but the ledger
      does not;
    - EXPORT_DIFFERS (warning): an exported file's bytes are not the ledger's
      record at that sequence (stale or edited copy; the ledger wins, and
      `dome ledger export` rewrites it).
    """
    import hashlib

    from .record import loads_record
    from .verify import Problem

    root = Path(ops_root) if ops_root is not None else ledger.ops_root
    runs_dir = root / "runs"
    problems: list = []
    warnings: list[str] = []
    if not runs_dir.is_dir():
        return problems, warnings
    known = set(ledger.run_ids())
    for run_id in sorted(known):
        seqs = exported_sequences(root, run_id)
        if not seqs:
            continue
        records = {r.sequence: r for r in ledger.events(run_id)}
        head = max(records) if records else 0
        for seq in seqs:
            raw = _exported_bytes(event_path(root, run_id, seq))
            if seq <= head:
                if raw != records[seq].record_bytes:
                    warnings.append(f"EXPORT_DIFFERS: run {run_id} sequence {seq}: "
                                    f"{event_path(root, run_id, seq)} is not the ledger's record")
                continue
            if seq == head + 1 and raw is not None:
                try:
                    env = loads_record(raw)
                    chains = (isinstance(env, dict) and env.get("sequence") == seq
                              and env.get("prev_digest") == (records[head].record_digest if head else None))
                except ValueError:
                    chains = False
                if chains:
                    problems.append(Problem(
                        code="LEDGER_TRUNCATED",
                        message=f"the ledger ends at sequence {head} but the exported record "
                                f"{seq} chains onto it: records were removed from the end of the run",
                        run_id=run_id, sequence=seq, event_id=env.get("event_id"), row_id=None,
                        details={"export": str(event_path(root, run_id, seq)),
                                 "export_record_digest": "sha256:" + hashlib.sha256(raw).hexdigest()}))
                    break
            warnings.append(f"EXPORT_DIFFERS: run {run_id} sequence {seq}: exported but not in the ledger")
    return problems, warnings
