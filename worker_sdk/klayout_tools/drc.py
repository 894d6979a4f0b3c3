"""run_drc_script: run a deck on an exported copy of the session layout.

Ruby decks run as `klayout -b -r DECK -rd input=COPY -rd output=REPORT
-rd top_cell=TOP -rd NAME=VALUE ...`; Python decks run as `python -I
pydeck_runner.py SPEC.json` (klayout.db in a child process). Both are an
argv list (never a shell), in the run directory, with a minimal
environment, a timeout that kills the whole process group, and stdout and
stderr captured to files. The deck path was validated against the allowed
roots; parameters are names matching [A-Za-z_][A-Za-z0-9_]* and string
values that reach the deck as data ($name in Ruby, deck.params in Python).
A KLayout macro file (.lydrc) runs the DRC script held in its <text>.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .config import Config
from .errors import DrcRunFailed, InvalidTarget
from .markers import VIOLATIONS_SCHEMA_VERSION, read_report, violations
from .sessions import RunRecord, Session

RESERVED_PARAMS = ("input", "output", "top_cell")
MACRO_SUFFIXES = (".lydrc", ".lym")
RUNNER = Path(__file__).resolve().parent / "pydeck_runner.py"
TAIL = 4000


# what may stand at the top level of a Python deck: its top level runs when the runner loads it, so
# anything beyond definitions would run before (and whether or not) run(deck) is the deck
_DECK_TOP_LEVEL = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)


def _is_python_deck(source: bytes) -> bool:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    has_run = False
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue  # a docstring
        if not isinstance(node, _DECK_TOP_LEVEL):
            return False
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            try:  # constants only: no call, no expression with effects
                ast.literal_eval(node.value) if node.value is not None else None
            except ValueError:
                return False
        if isinstance(node, ast.FunctionDef) and node.name == "run" and not node.decorator_list:
            has_run = True
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.decorator_list:
            return False  # a decorator runs at load time
    return has_run


def check_deck(script: Path, script_type: str | None) -> str:
    """The deck's script type, or NotADeck: a deck suffix for its type, and a Python deck that is
    only definitions with a run(deck). A file that is not a deck is never run, and nothing of its
    content is returned."""
    from registry.pathpolicy import NotADeck, deck_kind

    kind = deck_kind(script, script_type)
    if kind == "python" and not _is_python_deck(script.read_bytes()):
        raise NotADeck("script_path is not a Python deck: a deck is imports, constants and definitions "
                       "with a run(deck) function, and nothing else at its top level",
                       details={"field": "script_path", "script_type": kind, "reason": "not_a_python_deck"},
                       hints=["put the deck's work inside run(deck)"])
    return kind


def validate_params(params: dict[str, str]) -> dict[str, str]:
    for name, value in params.items():
        if name in RESERVED_PARAMS:
            raise InvalidTarget(f"parameter name {name!r} is reserved", details={"param": name,
                                "reserved": list(RESERVED_PARAMS)})
        if "\x00" in value:
            raise InvalidTarget("parameter values may not contain NUL", details={"param": name})
    return dict(sorted(params.items()))


def resolve_klayout_bin(raw: str) -> str:
    if os.sep in raw:
        path = Path(raw)
        if path.is_absolute() and path.is_file() and os.access(path, os.X_OK):
            return str(path.resolve())
        found = None
    else:
        found = shutil.which(raw)
    if not found:
        raise DrcRunFailed("the KLayout executable was not found",
                           details={"reason": "klayout_not_found", "klayout_bin": raw},
                           hints=["install the klayout package or set KLAYOUT_BIN to its absolute path"])
    return str(Path(found).resolve())


def _child_env(run_dir: Path) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(run_dir), "LANG": "C.UTF-8",
           "LC_ALL": "C.UTF-8", "QT_QPA_PLATFORM": "offscreen"}
    return env


def new_run_id(session: Session) -> str:
    while True:
        rid = "drc_" + secrets.token_hex(4)
        if rid not in session.runs and not (session.artifact_dir / "drc" / rid).exists():
            return rid


# Other names decks written for other KLayout runners use for the same three values. Each is set
# too (as $name), unless the caller passed a parameter of that name, which then wins.
RUBY_ALIASES = {"input": ("layout", "gds", "input_file", "in_gds"),
                "output": ("report", "report_file", "output_file", "rdb"),
                "top_cell": ("topcell", "top")}


def ruby_variables(layout_copy: Path, report: Path, top_cell: str, params: dict[str, str]) -> dict[str, str]:
    """Every global a Ruby deck sees: $input, $output, $top_cell, their aliases, then the caller's params."""
    base = {"input": str(layout_copy), "output": str(report), "top_cell": top_cell}
    out = dict(base)
    for name, aliases in RUBY_ALIASES.items():
        for alias in aliases:
            if alias not in params:
                out[alias] = base[name]
    out.update(params)
    return out


def macro_body(script: Path, run_dir: Path) -> Path:
    """A KLayout macro file (.lydrc/.lym XML): the DRC script inside it, written to the run folder.

    Only DRC (the drc DSL) and Ruby macros can run here; anything else is refused with what to do.
    """
    import xml.etree.ElementTree as ET

    try:
        root = ET.fromstring(script.read_bytes())
    except ET.ParseError as exc:
        raise DrcRunFailed("the deck is not a valid KLayout macro file", details={
            "reason": "bad_macro", "error": str(exc)}, hints=[
            "a .lydrc file is KLayout macro XML with the DRC script in <text>; "
            "or save the script itself as a .drc file"]) from None
    text = root.findtext("text")
    interpreter = (root.findtext("interpreter") or "").strip()
    dsl = (root.findtext("dsl-interpreter-name") or "").strip()
    if interpreter not in ("dsl", "ruby") or (interpreter == "dsl" and dsl not in ("", "drc-dsl-xml", "drc-dsl")):
        raise DrcRunFailed("only DRC and Ruby macros can run as decks", details={
            "reason": "unsupported_macro", "interpreter": interpreter, "dsl_interpreter": dsl}, hints=[
            "a Python DRC deck is a .py file defining run(deck); see docs/klayout.md"])
    if not text or not text.strip():
        raise DrcRunFailed("the macro holds no script", details={"reason": "empty_macro"},
                           hints=["the DRC script goes in the macro's <text> element"])
    body = run_dir / "deck.drc"
    body.write_text(text)
    return body


def build_argv(script_type: str, script: Path, layout_copy: Path, report: Path, top_cell: str,
               params: dict[str, str], run_dir: Path, klayout_bin: str) -> list[str]:
    if script_type == "ruby":
        if script.suffix.lower() in MACRO_SUFFIXES:
            script = macro_body(script, run_dir)
        argv = [klayout_bin, "-b", "-r", str(script)]
        for name, value in ruby_variables(layout_copy, report, top_cell, params).items():
            argv += ["-rd", f"{name}={value}"]
        return argv
    spec = {"script": str(script), "input": str(layout_copy), "output": str(report), "top_cell": top_cell,
            "params": params}
    spec_path = run_dir / "deck_spec.json"
    spec_path.write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n")
    return [sys.executable, "-I", str(RUNNER), str(spec_path)]


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-TAIL:].decode("utf-8", "replace")


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_deck(session: Session, script: Path, script_type: str, params: dict[str, str],
             config: Config, token: Any = None) -> tuple[RunRecord, int, dict[str, int], float]:
    """Run the deck; `token` (a CancellationToken) stops the child when cancelled."""
    params = validate_params(params)
    klayout_bin = resolve_klayout_bin(config.klayout_bin) if script_type == "ruby" else ""
    deck_bytes = script.read_bytes()
    run_id = new_run_id(session)
    run_dir = session.artifact_dir / "drc" / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "crops").mkdir()
    layout_copy = run_dir / ("layout.oas" if session.source["format"] == "oas" else "layout.gds")
    session.layout.write(str(layout_copy))
    report = run_dir / "report.lyrdb"
    stdout_path, stderr_path = run_dir / "stdout.txt", run_dir / "stderr.txt"
    argv = build_argv(script_type, script, layout_copy, report, session.top_cell, params, run_dir, klayout_bin)
    base = {"run_id": run_id, "script_path": str(script), "script_type": script_type,
            "stdout_path": str(stdout_path), "stderr_path": str(stderr_path)}
    started = time.monotonic()
    with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
        try:
            proc = subprocess.Popen(argv, cwd=run_dir, env=_child_env(run_dir), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, shell=False, start_new_session=True)
        except OSError as exc:
            raise DrcRunFailed("the DRC process could not start", details={**base, "reason": "spawn_failed",
                                                                          "error": str(exc)}) from exc
        deadline = started + config.drc_timeout_seconds
        rc = None
        while rc is None:
            try:
                rc = proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                if token is not None and token.cancelled:
                    _kill(proc)
                    token.check()
                if time.monotonic() >= deadline:
                    break
        if rc is None:
            _kill(proc)
            raise DrcRunFailed("the DRC run timed out", retry="none",
                               details={**base, "reason": "timeout", "timeout_s": config.drc_timeout_seconds,
                                        "stderr_tail": _tail(stderr_path)},
                               hints=["KLAYOUT_MCP_DRC_TIMEOUT_SECONDS raises the limit"])
    duration = time.monotonic() - started
    if rc != 0:
        raise DrcRunFailed("the DRC deck failed", details={**base, "reason": "nonzero_exit", "return_code": rc,
                                                          "stderr_tail": _tail(stderr_path),
                                                          "stdout_tail": _tail(stdout_path)})
    if not report.is_file():
        raise DrcRunFailed("the DRC deck wrote no report", details={**base, "reason": "no_report",
                           "expected_report": str(report), "stdout_tail": _tail(stdout_path)},
                           hints=["a Ruby deck must call report(..., $output); a Python deck must call deck.output"])
    markers, rule_counts = read_report(report, session.dbu)
    deck_sha = hashlib.sha256(deck_bytes).hexdigest()
    viol = violations(markers, deck_name=script.name, deck_sha256=deck_sha, run_id=run_id, dbu=session.dbu)
    # compact: pretty-printing ten thousand markers costs more than reading the report
    (run_dir / "markers.json").write_text(json.dumps(
        {"run_id": run_id, "deck": str(script), "script_type": script_type, "deck_sha256": deck_sha,
         "marker_count": len(markers),
         "rule_counts": rule_counts, "markers": markers,
         "schema_version": VIOLATIONS_SCHEMA_VERSION, "violations": viol}, separators=(",", ":")) + "\n")
    record = RunRecord(run_id=run_id, run_dir=run_dir, script_path=str(script), script_type=script_type,
                       deck_sha256=deck_sha, report_path=report, markers=markers, violations=viol)
    session.runs[run_id] = record
    return record, rc, rule_counts, duration


def load_run(session: Session, run_id: str) -> RunRecord:
    """A finished run read back from its folder (markers.json is written last, so it marks a whole run)."""
    run_dir = session.artifact_dir / "drc" / run_id
    data = json.loads((run_dir / "markers.json").read_text())
    return RunRecord(run_id=run_id, run_dir=run_dir, script_path=data["deck"], script_type=data.get("script_type", ""),
                     deck_sha256=data["deck_sha256"], report_path=run_dir / "report.lyrdb",
                     markers=data["markers"], violations=data.get("violations", []))


def run_artifacts(record: RunRecord) -> list[dict[str, Any]]:
    d = record.run_dir
    layout_copy = next(p for p in (d / "layout.gds", d / "layout.oas") if p.exists())
    return [
        {"kind": "drc_report", "path": str(record.report_path), "media_type": "application/octet-stream"},
        {"kind": "markers", "path": str(d / "markers.json"), "media_type": "application/json"},
        {"kind": "layout_copy", "path": str(layout_copy), "media_type": "application/octet-stream"},
        {"kind": "stdout", "path": str(d / "stdout.txt"), "media_type": "text/plain"},
        {"kind": "stderr", "path": str(d / "stderr.txt"), "media_type": "text/plain"},
    ]
