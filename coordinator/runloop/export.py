"""Project a run's ledger events onto ops/runs/<run_id>/ (DESIGN.md layout).

    work.queue.json                        (written at run start)
    events/event.<sequence>.json           every ControlEvent record, as stored (ledger.export)
    tasks/<task_id>/task.result.json       per node: status, attempts, winner, proposal
    tasks/<task_id>/outputs/<proposal_id>.proposal.json and .diff

The ledger is the truth; these files are a projection rebuilt on demand
(idempotent: rewriting gives the same bytes for the same events). The event
files have one writer, `ledger.export`, shared with `dome ledger export`.
`task_files` is the pure projection of tasks/; `dome verify` compares the
files on disk with it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ledger import Ledger
from ledger.export import export_stream, put_file
from ledger.paging import iter_events

from .. import runstate as rs
from ..runstate import fold
from ..scheduler import statuses
from ..workgraph import Graph


def render_json(obj: Any) -> bytes:
    """The bytes an exported JSON file holds: `json.dumps(obj, indent=2,
    sort_keys=True)` and a newline (the stdlib writes indented JSON with its
    pure-Python encoder; `_indented` gives the same text in one recursive pass)."""
    try:
        text = _indented(obj, "\n")
    except _Generic:
        text = json.dumps(obj, indent=2, sort_keys=True)
    return (text + "\n").encode("utf-8")


class _Generic(Exception):
    """A value `_indented` leaves to the stdlib encoder."""


_ascii_str = json.encoder.encode_basestring_ascii
_INF = float("inf")


def _indented(obj: Any, nl: str) -> str:
    """`json.dumps(obj, indent=2, sort_keys=True)`, `nl` being a newline and the
    current indent, for dicts with str keys, lists, str, int, float, bool and None."""
    t = type(obj)
    if t is str:
        return _ascii_str(obj)
    if t is dict:
        if not obj:
            return "{}"
        inner = nl + "  "
        parts = []
        for k in sorted(obj):
            if type(k) is not str:
                raise _Generic
            parts.append(f"{_ascii_str(k)}: {_indented(obj[k], inner)}")
        return "{" + inner + ("," + inner).join(parts) + nl + "}"
    if t is list:
        if not obj:
            return "[]"
        inner = nl + "  "
        return "[" + inner + ("," + inner).join([_indented(v, inner) for v in obj]) + nl + "]"
    if obj is None:
        return "null"
    if obj is True:
        return "true"
    if obj is False:
        return "false"
    if t is int:
        return int.__repr__(obj)
    if t is float:  # the stdlib's floatstr with allow_nan
        if obj != obj:
            return "NaN"
        if obj in (_INF, -_INF):
            return "Infinity" if obj > 0 else "-Infinity"
        return float.__repr__(obj)
    raise _Generic  # tuples, subclasses and anything else: the stdlib's rules


def _write_all(root: Path, files: Iterable[tuple[str, bytes]]) -> None:
    """Write the files (relative path, bytes) under root: a new file is one
    exclusive create and one write; folders are made when a create finds none."""
    base = os.fspath(root)
    for rel, data in files:
        put_file(f"{base}/{rel}", data)


HISTORY_TOPICS = frozenset({rs.TASK_DISPATCHED, *rs.TERMINAL_ATTEMPT_TOPICS, rs.PATCH_SUBMITTED, rs.TASK_ACK,
                            rs.SANDBOX_VIOLATION})


def task_files(events: Iterable[Any], graph: Graph, run_id: str,
               blob: Callable[[str], bytes]) -> dict[str, bytes]:
    """tasks/... relative path -> exact bytes, from the run's events (pure but for `blob`)."""
    return dict(iter_task_files(events, graph, run_id, blob))


def iter_task_files(events: Iterable[Any], graph: Graph, run_id: str,
                    blob: Callable[[str], bytes]) -> Iterator[tuple[str, bytes]]:
    """`task_files` one file at a time, reading `events` once (they may be a stream):
    what is kept is the folded run state and a short history row per attempt event."""
    by_node: dict[str, list[dict[str, Any]]] = {}

    def noted() -> Iterator[Any]:
        for rec in events:
            if rec.node_id and rec.topic in HISTORY_TOPICS:
                by_node.setdefault(rec.node_id, []).append(
                    {"sequence": rec.sequence, "topic": rec.topic, "node_execution_id": rec.node_execution_id,
                     **{k: rec.payload.get(k) for k in ("outcome", "reason", "exit_code", "kind", "attempt", "error",
                                                        "proposal_id") if rec.payload.get(k) is not None}})
            yield rec

    state = fold(noted())
    status = statuses(graph, state)
    proposals = {p["node_execution_id"]: p for p in state.proposals}
    for nid in graph.nodes:
        ns = state.node(nid)
        task_dir = "tasks/" + nid.replace("/", "_")
        winner = proposals.get(ns.succeeded_by) if ns.succeeded_by else None
        result = {"artifact_kind": "dome.task.result/v1", "run_id": run_id, "task_id": nid, "node_id": nid,
                  "status": status[nid], "attempts": ns.attempts, "failures": ns.failures,
                  "winner_node_execution_id": ns.succeeded_by,
                  "proposal_id": winner["proposal_id"] if winner else None,
                  "diff_digest": winner["diff_digest"] if winner else None,
                  "history": by_node.pop(nid, [])}
        yield f"{task_dir}/task.result.json", render_json(result)
        if winner:
            yield f"{task_dir}/outputs/{winner['proposal_id']}.proposal.json", render_json(winner["proposal"])
            yield f"{task_dir}/outputs/{winner['proposal_id']}.diff", blob(winner["diff_ref"])


def write_run_files(ledger: Ledger, run_id: str, ops_root: Path, graph: Graph) -> None:
    """The run's files, in one pass over its events read a page at a time: each
    event's file is written as it passes (ledger.export), and the task
    projection folds it. Memory: one page of events, the folded state and the
    history rows, never the whole run."""
    ops_dir = Path(ops_root) / "runs" / run_id
    stream = export_stream(iter_events(ledger, run_id), run_id, ops_root)
    _write_all(ops_dir, iter_task_files(stream, graph, run_id, ledger.blobs.get))
