"""What each tool of the front door does, in one table, and the hints and class derived from it.

A tool's MCP annotations (readOnlyHint, destructiveHint, idempotentHint) and
its capability class at the door (read | write | execute | admin, which
`--allow` filters on) are never written by hand: they follow from the
effects declared here, so a tool cannot be announced read-only while it
writes a file. tests/mcp/test_effects.py checks every served tool against
this table and the contract.

Effects:
  reads_files     opens files the caller names (under the read roots)
  writes_files    writes files the caller names (under the write roots; over one only with overwrite)
  artifacts       writes new files under the host's artifact folders
  session_state   creates, changes or ends state the host keeps for the caller (sessions, views, jobs)
  deletes         removes what an earlier call made (a session and its folder)
  stops_work      stops work in progress (a job)
  new_each_call   each call makes a new thing (a session, a DRC run, a run), so a repeat is not a no-op
  runs_code       runs a script or deck the caller chose
  repository      starts runs or moves refs in the repository (ledger records, branches)
"""
from __future__ import annotations

from typing import Mapping

EFFECTS = frozenset({"reads_files", "writes_files", "artifacts", "session_state", "deletes", "stops_work",
                     "new_each_call", "runs_code", "repository"})

TOOL_EFFECTS: Mapping[str, frozenset[str]] = {name: frozenset(e) for name, e in {
    # host tools
    "health": (), "telemetry": (), "poll": (), "events": (), "evidence": (), "run_status": (), "verify": (),
    "cancel": ("session_state", "stops_work"),
    "run_submit": ("reads_files", "repository", "new_each_call", "session_state"),
    "promote": ("repository", "deletes"),
    # litho
    "evaluate": ("reads_files",),
    "simulate": ("reads_files", "writes_files"),
    "optimize": ("reads_files", "writes_files"),
    # KLayout observer
    "open_layout": ("reads_files", "session_state", "artifacts", "new_each_call"),
    "close_session": ("session_state", "deletes"),
    "list_cells": (), "describe_cell": (), "list_layers": (), "query_region": (), "measure_geometry": (),
    "analyze_waveguide": (),
    "set_view": ("session_state",),
    "render_view": ("artifacts",),
    "extract_markers": ("artifacts",),
    "run_drc_script": ("reads_files", "runs_code", "artifacts", "new_each_call"),
}.items()}


def capability(effects: frozenset[str]) -> str:
    """The class `--allow` filters on: code is not a read, and a repository change is an operator's."""
    if "repository" in effects:
        return "admin"
    if "runs_code" in effects:
        return "execute"
    if effects & {"writes_files", "stops_work"}:
        return "write"
    return "read"


def hints(effects: frozenset[str]) -> dict[str, bool]:
    """The MCP annotations: read-only means no effect at all beyond reading files."""
    return {
        "readOnlyHint": effects <= {"reads_files"},
        # a caller-named file may be replaced (overwrite), a session or job ended, a ref moved, code run
        "destructiveHint": bool(effects & {"writes_files", "deletes", "stops_work", "repository", "runs_code"}),
        "idempotentHint": "new_each_call" not in effects,
    }
