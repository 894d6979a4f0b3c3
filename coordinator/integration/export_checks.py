"""Check what dome hands to others: the files under ops/runs/<run_id>/.

Every exported file is a projection of the ledger, so each is rebuilt here
from the ledger records and compared byte for byte with the file on disk:

    events/event.<N>.json          the ledger record N (either exporter's rendering)
    work.queue.json                digest recorded in run.started
    tasks/<node>/task.result.json  (and outputs/) the task projection of the events
    gate/gate.decision.json        the last gate.computed artifact
    promotion/promotion.decision.json, promotion/evidence.intoto.jsonl
                                   the last promotion.computed artifact, and the in-toto
                                   statements of its evidence, each DSSE envelope signed

A changed byte, a removed file or a file the ledger does not account for is
a failed check whose subject names the file (relative to the run folder).
"""
from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ledger import EventRecord
from ledger.export import render as render_event
from registry.canonical import canonical_json, digest_json
from registry.errors import DomeError, SignatureError
from registry.signing import Keyring, dsse_verify

from .evidence import INTOTO_PAYLOAD, T_CONSENT_REQ, T_GATE, T_PROMOTION, Record, intoto_statements
from .verify_result import CheckKind, CheckResult, failed, missing, ok

RUN_STARTED = "run.started"
RUN_FINISHED = "run.finished"
GATE_FILE = "gate/gate.decision.json"
CONSENT_FILE = "gate/consent.token"
PROMOTION_FILE = "promotion/promotion.decision.json"
INTOTO_FILE = "promotion/evidence.intoto.jsonl"


def _files(root: Path) -> dict[str, Path]:
    """Every entry under root (relative posix path -> path); folders only when empty."""
    out: dict[str, Path] = {}
    if not root.is_dir():
        return out
    for p in sorted(root.rglob("*")):
        if p.is_dir() and any(p.iterdir()):
            continue
        out[p.relative_to(root.parent).as_posix()] = p
    return out


def _compare(kind: CheckKind, expected: dict[str, bytes], actual: dict[str, Path],
             required: Iterable[str]) -> list[CheckResult]:
    """One result per file that is missing, differs or is unaccounted for; one ok if none."""
    bad: list[CheckResult] = []
    req = set(required)
    for rel in sorted(set(expected) | set(actual)):
        path = actual.get(rel)
        if path is None:
            if rel in req:
                bad.append(missing(kind, "file removed", rel))
            continue
        if rel not in expected:
            bad.append(failed(kind, "file the ledger does not account for", rel))
            continue
        try:
            data = path.read_bytes()
        except OSError as exc:
            bad.append(failed(kind, f"unreadable: {exc.strerror}", rel))
            continue
        if data != expected[rel]:
            bad.append(failed(kind, "file differs from what the ledger records", rel))
    return bad or [ok(kind)]


def check_events(run_dir: Path, events: Sequence[EventRecord], *, required_through: int | None,
                 run_loop: bool) -> list[CheckResult]:
    """events/: every file is a ledger record's export, and every record up to
    `required_through` (the run.finished the exports were written for) has one."""
    d = run_dir / "events"
    if not d.is_dir():
        if run_loop:
            return [missing(CheckKind.EXPORT_EVENTS, "no exported events", "events/")]
        return []
    expected: dict[str, bytes] = {}
    records: dict[str, EventRecord] = {}
    for rec in events:
        rel = f"events/event.{rec.sequence}.json"
        expected[rel] = render_event(rec)
        records[rel] = rec
    actual = _files(d)
    for rel, path in actual.items():
        rec = records.get(rel)
        if rec is None:
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        # the run loop once wrote ASCII-escaped, indented JSON, `dome ledger export` compact
        # UTF-8: both are the record (the indented form is rendered only for a file that differs)
        if data != expected[rel] and data == (json.dumps(rec.to_json(), indent=2, sort_keys=True) + "\n").encode():
            expected[rel] = data
    req = [f"events/event.{r.sequence}.json" for r in events
           if required_through is not None and r.sequence <= required_through]
    return _compare(CheckKind.EXPORT_EVENTS, expected, actual, req)


def check_work_queue(run_dir: Path, started: dict[str, Any]) -> tuple[list[CheckResult], Any]:
    """work.queue.json must be the queue run.started names by digest; returns its JSON when it is."""
    rel = "work.queue.json"
    path = run_dir / rel
    if not path.is_file():
        return [missing(CheckKind.EXPORT_WORK_QUEUE, "file removed", rel)], None
    try:
        data = path.read_bytes()
        raw = json.loads(data)
    except (OSError, ValueError) as exc:
        return [failed(CheckKind.EXPORT_WORK_QUEUE, f"not JSON: {exc}", rel)], None
    if digest_json(raw) != started.get("work_queue_digest"):
        return [failed(CheckKind.EXPORT_WORK_QUEUE, "digest differs from the one run.started records", rel)], None
    if data != (json.dumps(raw, indent=2, sort_keys=True) + "\n").encode():
        return [failed(CheckKind.EXPORT_WORK_QUEUE, "file differs from what the ledger records", rel)], None
    return [ok(CheckKind.EXPORT_WORK_QUEUE, rel)], raw


def check_tasks(run_dir: Path, events: Sequence[EventRecord], queue: Any, run_id: str,
                blob: Callable[[str], bytes]) -> list[CheckResult]:
    """tasks/: the task projection of the events through the last run.finished."""
    from ..runloop.export import task_files
    from ..workqueue import parse_work_queue
    if queue is None:
        return [missing(CheckKind.EXPORT_TASKS, "cannot rebuild without the run's work queue", "tasks/")]
    try:
        expected = task_files(events, parse_work_queue(queue).graph, run_id, blob)
    except DomeError as exc:
        return [missing(CheckKind.EXPORT_TASKS, f"cannot rebuild: {exc.code}: {exc.message}", "tasks/")]
    return _compare(CheckKind.EXPORT_TASKS, expected, _files(run_dir / "tasks"), expected)


def _last(records: Sequence[Record], topic: str) -> Record | None:
    found = [r for r in records if r.topic == topic]
    return found[-1] if found else None


def check_gate(run_dir: Path, records: Sequence[Record]) -> list[CheckResult]:
    gate = _last(records, T_GATE)
    expected = {GATE_FILE: canonical_json(gate.artifact) + b"\n"} if gate else {}
    actual = _files(run_dir / "gate")
    if CONSENT_FILE in actual and any(r.topic == T_CONSENT_REQ for r in records):
        actual.pop(CONSENT_FILE)  # the admin's secret; only its digest is in the ledger
    if not expected and not actual:
        return []
    return _compare(CheckKind.EXPORT_GATE, expected, actual, expected)


def check_promotion(run_dir: Path, records: Sequence[Record], keyring: Keyring) -> list[CheckResult]:
    promo = _last(records, T_PROMOTION)
    actual = _files(run_dir / "promotion")
    if promo is None:
        return [failed(CheckKind.EXPORT_PROMOTION, "file the ledger does not account for", rel)
                for rel in actual]
    out = _compare(CheckKind.EXPORT_PROMOTION,
                   {PROMOTION_FILE: canonical_json(promo.artifact) + b"\n"},
                   {k: v for k, v in actual.items() if k != INTOTO_FILE},
                   [PROMOTION_FILE])
    before = [r for r in records if r.sequence < promo.sequence]
    out.extend(check_intoto(actual.get(INTOTO_FILE), intoto_statements(before, promo.artifact), keyring))
    return out


def check_intoto(path: Path | None, statements: list[dict[str, Any]], keyring: Keyring) -> list[CheckResult]:
    """Each line a DSSE envelope (signed by a key of the keyring) whose payload
    is exactly the canonical statement dome derives from the ledger."""
    kind, rel = CheckKind.EXPORT_INTOTO, INTOTO_FILE
    if path is None:
        return [missing(kind, "file removed", rel)]
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as exc:
        return [failed(kind, f"unreadable: {exc.strerror}", rel)]
    if lines[-1:] == [b""]:
        lines.pop()
    bad: list[CheckResult] = []
    if len(lines) != len(statements):
        bad.append(failed(kind, f"{len(lines)} statements, the ledger accounts for {len(statements)}", rel))
    for i, (line, stmt) in enumerate(zip(lines, statements), start=1):
        where = f"{rel}#{i}"
        try:
            env = json.loads(line)
            if line != json.dumps(env, sort_keys=True).encode():
                raise ValueError("not in dome's rendering")
            payload, _ = dsse_verify(env, keyring, expected_type=INTOTO_PAYLOAD)
        except SignatureError as exc:
            bad.append(failed(kind, f"{exc.code}: {exc.message}", where))
            continue
        except (ValueError, TypeError, binascii.Error) as exc:
            bad.append(failed(kind, f"not a DSSE envelope: {exc}", where))
            continue
        if payload != canonical_json(stmt):
            bad.append(failed(kind, "statement differs from the ledger's evidence", where))
    return bad or [ok(kind, rel)]


def run_lifecycle(events: Sequence[EventRecord]) -> tuple[dict[str, Any] | None, int | None, int | None]:
    """(run.started payload, sequence of the first and of the last run.finished)."""
    started = next((e.payload for e in events if e.topic == RUN_STARTED), None)
    fins = [e.sequence for e in events if e.topic == RUN_FINISHED]
    return started, (fins[0] if fins else None), (fins[-1] if fins else None)


def check_signed_after_finish(events: Sequence[EventRecord], first_finish: int,
                              keyring: Keyring) -> list[CheckResult]:
    """After run.finished only the admin writes (dome promote), and signs each record."""
    from ledger import PAYLOAD_TYPE
    kind = CheckKind.SIGNED_AFTER_FINISH
    bad: list[CheckResult] = []
    for e in events:
        if e.sequence <= first_finish:
            continue
        subject = f"#{e.sequence} {e.topic}"
        if not e.kid or not e.signature:
            bad.append(failed(kind, "unsigned record after run.finished", subject))
            continue
        try:
            keyring.get(e.kid).verify_pae(PAYLOAD_TYPE, e.record_bytes, base64.b64decode(e.signature))
        except (SignatureError, binascii.Error, ValueError) as exc:
            bad.append(failed(kind, f"signature does not verify: {exc}", subject))
    return bad or [ok(kind)]
