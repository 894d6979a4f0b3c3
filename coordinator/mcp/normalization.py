"""Normalization of unambiguous model slips, reported back to the caller.

Only rewrites whose meaning is certain are made: a tool-name alias or a
different spelling of a tool name, a field alias or camelCase spelling that
maps to exactly one field of the tool, integer-like / number-like /
boolean-like strings where the schema wants that type, `file://` URIs and
`~` or `\\` forms of path fields. A relative path is refused (typed), never
resolved against the host's working folder. Everything else is left for the
closed schema to reject. Each rewrite is reported as a short note.
"""
from __future__ import annotations

import os
import re
from typing import Any, Mapping
from urllib.parse import unquote, urlparse

from registry.errors import DomeError
from registry.input_codes import input_error_code

from ..toolcore import ToolInputError
from .catalog import ToolSpec

# alias -> canonical field names it may stand for (applied only when exactly one is a field of the tool)
FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "file": ("path", "layout"), "filename": ("path", "layout"), "file_path": ("path", "layout"),
    "filepath": ("path", "layout"), "layout_path": ("layout", "path"), "gds": ("layout", "path"),
    "input": ("layout", "path", "work_queue"), "queue": ("work_queue",), "workqueue": ("work_queue",),
    "session": ("session_id",), "sid": ("session_id",), "job": ("job_id",), "id": ("job_id",),
    "run": ("run_id",), "token": ("consent_token",), "consent": ("consent_token",),
    "level": ("report_level",), "detail": ("report_level",), "iters": ("iterations",),
    "max_iterations": ("iterations",), "deck": ("script_path",), "script": ("script_path",),
    "output": ("out",), "output_path": ("out",), "cell_name": ("cell", "top_cell"), "bbox": ("box",),
    "targets": ("target_ids",), "target": ("target_id",), "format_": ("format",), "since_seq": ("since",),
    "after": ("since",), "output_format": ("render",), "format_output": ("render",),
}
PATH_FIELDS = frozenset({"path", "layout", "mask", "out", "out_dir", "script_path", "work_queue",
                         "heartbeat", "marker", "effect"})
_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")
_INT = re.compile(r"^[+-]?\d+$")
_NUM = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def snake(name: str) -> str:
    return _CAMEL.sub(r"_\1", name).replace("-", "_").replace(".", "_").replace(" ", "_").lower()


class ToolNames:
    """Canonical tool names plus every unambiguous alias and spelling."""

    def __init__(self, specs: Mapping[str, ToolSpec]) -> None:
        self._exact = set(specs)
        table: dict[str, set[str]] = {}
        for spec in specs.values():
            for key in (spec.name, *spec.aliases):
                for form in {key, snake(key), snake(key).replace("_", "")}:
                    table.setdefault(form, set()).add(spec.name)
        self._table = {k: next(iter(v)) for k, v in table.items() if len(v) == 1}

    def resolve(self, name: str) -> str | None:
        if name in self._exact:
            return name
        for form in (name, snake(name), snake(name).replace("_", "")):
            if form in self._table:
                return self._table[form]
        # "dome.litho.evaluate" / "litho/evaluate": try the last segment
        tail = re.split(r"[./:]", name)[-1]
        return self._table.get(snake(tail)) if tail != name else None


def _coerce(value: Any, schema: Mapping[str, Any]) -> tuple[Any, bool]:
    t = schema.get("type")
    if isinstance(value, str):
        s = value.strip()
        if t == "integer" and _INT.match(s):
            return int(s), True
        if t == "number" and _NUM.match(s):
            return float(s), True
        if t == "boolean" and s.lower() in ("true", "false"):
            return s.lower() == "true", True
        if "enum" in schema and value not in schema["enum"]:
            low = [e for e in schema["enum"] if isinstance(e, str) and e.lower() == s.lower()]
            if len(low) == 1:
                return low[0], True
    return value, False


def normalize_path(value: str) -> str:
    v = value.strip()
    if v.startswith("file:"):
        parsed = urlparse(v)
        if parsed.netloc not in ("", "localhost"):
            return value  # a remote host: not unambiguous, leave it for the tool to reject
        v = unquote(parsed.path)
    if "\\" in v and "/" not in v:
        v = v.replace("\\", "/")
    v = os.path.expanduser(v)
    if not os.path.isabs(v):
        return value  # never resolved against the host's folder: refused by the caller
    return os.path.normpath(v)


def _relative_path(spec: ToolSpec, field: str, value: str) -> DomeError:
    """A relative path means nothing to a host a client may not share a folder with: refused, typed."""
    code = input_error_code(spec.contract_id, [f"/{field}"]) or ToolInputError.code
    return DomeError(f"{spec.name}: {field} must be an absolute path", code=code,
                     details={"tool": spec.name, "field": field, "path": value, "reason": "not_absolute"},
                     hints=["pass an absolute path (or a file:// URI); relative paths are not resolved"],
                     retry="none")


def _output_field(tool: str, field: str) -> bool:
    """An output path may be relative: it lands in the caller's artifact folder (registry.pathpolicy)."""
    from registry.pathpolicy import TOOL_PATHS

    return TOOL_PATHS.get(tool, {}).get(field) in ("write", "write_dir", "resume_dir")


def normalize_arguments(spec: ToolSpec, args: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    props: Mapping[str, Any] = spec.input_schema.get("properties", {})
    out: dict[str, Any] = {}
    notes: list[str] = []
    for key, value in args.items():
        target = key
        if key not in props:
            candidates = [snake(key)] if snake(key) in props else []
            if not candidates:
                candidates = [c for c in FIELD_ALIASES.get(snake(key), ()) if c in props]
            if len(candidates) == 1 and candidates[0] not in args and candidates[0] not in out:
                target = candidates[0]
                notes.append(f"field {key} -> {target}")
        schema = props.get(target)
        if isinstance(schema, Mapping):
            value, changed = _coerce(value, schema)
            if changed:
                notes.append(f"{target}: coerced {args[key]!r} -> {value!r}")
            if target in PATH_FIELDS and isinstance(value, str) and value and not value.startswith("sha256:"):
                norm = normalize_path(value)
                if not os.path.isabs(norm) and not _output_field(spec.name, target):
                    raise _relative_path(spec, target, value)
                if norm != value:
                    notes.append(f"{target}: path {value} -> {norm}")
                    value = norm
        out[target] = value
    return out, notes
