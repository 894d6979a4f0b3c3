"""Mirror the ledger to files: OPS_ROOT/runs/<run_id>/events/event.<sequence>.json.

The files are a projection: if they disagree with the ledger, the ledger
wins and `export_run` rewrites them. Each file is the record's export form
(EventRecord.to_json(): the envelope fields, record_digest, signature, and a
DSSE envelope with the exact record bytes so a third party can check them
without re-serializing anything). Each file is compact JSON with sorted keys
(one pass of the C encoder). A new file is written in place, created
exclusively (a torn write is a file whose bytes differ, which the next export
rewrites and `dome verify` reports as EXPORT_DIFFERS, never as a record);
a file that differs from the ledger is replaced atomically (temp file +
rename).
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

from .paging import iter_events
from .record import EventRecord


def run_dir_name(run_id: str) -> str:
    """A run id as one path segment (ids may contain '/')."""
    return run_id.replace("%", "%25").replace("/", "%2F")


def events_dir(ops_root: Path | str, run_id: str) -> Path:
    return Path(ops_root) / "runs" / run_dir_name(run_id) / "events"


def event_path(ops_root: Path | str, run_id: str, sequence: int) -> Path:
    return events_dir(ops_root, run_id) / f"event.{sequence}.json"


def render(rec: EventRecord) -> bytes:
    return (json.dumps(rec.to_json(), sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n"
            ).encode("utf-8")


def _write_new(path: Path, data: bytes) -> bool:
    """Create `path` holding `data`; False (nothing written) when it exists already."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    return True


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def put_file(path: Path, data: bytes, *, absent: bool = False) -> bool:
    """Make `path` hold exactly `data`; True when it was written. `absent`: the
    caller listed the folder and the name was not there (one create, no read)."""
    if absent and _write_new(path, data):
        return True
    try:
        if path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    _write_atomic(path, data)
    return True


class _FileWriter:
    """Writes records' files, listing each events directory once; a file that
    already holds the same bytes is left alone."""

    def __init__(self, ops_root: Path | str) -> None:
        self.ops_root = ops_root
        self.present: dict[Path, set[str]] = {}  # per events directory: the names already there

    def __call__(self, rec: EventRecord) -> Path | None:
        """The path written, or None when the file already held these bytes."""
        path = event_path(self.ops_root, rec.run_id, rec.sequence)
        names = self.present.get(path.parent)
        if names is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            names = self.present[path.parent] = set(os.listdir(path.parent))
        return path if put_file(path, render(rec), absent=path.name not in names) else None


def export_records(records: Iterable[EventRecord], ops_root: Path | str) -> list[Path]:
    """Write these records' files (what the run loop calls after appending);
    a file that already holds the same bytes is left alone."""
    write = _FileWriter(ops_root)
    return [p for p in map(write, records) if p is not None]


def _remove_strays(root: Path, run_id: str, keep: set[int]) -> None:
    d = events_dir(root, run_id)
    if d.is_dir():
        for stray in d.glob("event.*.json"):
            middle = stray.name[len("event."):-len(".json")]
            if not (middle.isdigit() and str(int(middle)) == middle and int(middle) in keep):
                stray.unlink()


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
            written.append(path)
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
