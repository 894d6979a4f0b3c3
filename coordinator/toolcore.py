"""The dispatch core shared by every door that runs tools.

Two doors call tools: the worker gateway (coordinator/gateway, grant-bearing
workers inside sandboxes) and the MCP front door (coordinator/mcp, agents
and people). Each door keeps its own transport and its own authorization
(grants and call proofs; allow-lists and consent). What a call *is* lives
here, once, so one fault gets one code whichever door it came through:

- `InputSchema`: a tool's closed input schema, compiled once. The fast path
  is a set difference (unknown fields, named) and one compiled `is_valid`;
  the full error list is built only for a request that fails. A failure is
  `INVALID_REQUEST` (the registry contracts' code for "does not validate
  against the method's input schema"), or the contract's own input code
  where it has them (the KLayout observer: `INVALID_BOX`, ...).
- `error_object`: any exception as an ErrorObject. A DomeError keeps its
  code; anything else is `INTERNAL_ERROR` with no traceback on the wire.
- `CallStats`: per-tool call counts, errors and latency, in memory. The
  front door's Telemetry extends it with health and its event file.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Mapping

from jsonschema import Draft202012Validator

from registry.errors import DomeError
from registry.schema_store import inline_validator
from registry.input_codes import input_error_code

log = logging.getLogger("dome.tools")

MAX_MESSAGE = 300
MAX_LISTED_ERRORS = 10


class ToolInputError(DomeError):
    """The request failed the tool's closed input schema (the field is named)."""

    code = "INVALID_REQUEST"
    retry = "none"


class InternalError(DomeError):
    """An unexpected exception inside a tool or a door: shaped, never a traceback on the wire."""

    code = "INTERNAL_ERROR"
    retry = "none"


def unexpected(exc: BaseException) -> InternalError:
    log.error("tool call failed unexpectedly", exc_info=exc)
    return InternalError(f"internal error ({type(exc).__name__})",
                         hints=["see the coordinator's log (stderr) and telemetry"])


def error_object(exc: BaseException) -> dict[str, Any]:
    """The ErrorObject of any exception a tool call raised."""
    return (exc if isinstance(exc, DomeError) else unexpected(exc)).to_object()


def _lite_check(schema: Mapping[str, Any]) -> Any:
    """The small checker's yes/no for a self-contained schema (registry.schema_lite, held to
    jsonschema's verdicts), or None where it lacks a keyword or the schema has a $ref (which
    the inline validator, with no registry, would not resolve the same way)."""
    from registry.schema_lite import Unsupported, compile_schema
    if "$ref" in json.dumps(schema, default=str):
        return None
    try:
        return compile_schema(dict(schema))
    except Unsupported:
        return None


class InputSchema:
    """A closed input schema, checked once at compile time and cheaply per call."""

    __slots__ = ("tool", "contract_id", "fields", "validator", "passes")

    def __init__(self, tool: str, schema: Mapping[str, Any], contract_id: str | None = None) -> None:
        Draft202012Validator.check_schema(schema)
        self.tool = tool
        self.contract_id = contract_id
        self.fields = frozenset(schema.get("properties", {}))
        self.validator = inline_validator(dict(schema))  # patterns as ECMA 262, as the small checker
        self.passes = _lite_check(schema) or self.validator.is_valid

    def validate(self, args: Any) -> None:
        """Return quietly, or raise the typed error naming the first bad field."""
        if not isinstance(args, Mapping):
            raise self._error(f"{self.tool}: arguments must be an object", ["/"],
                              details={"tool": self.tool, "field": None}, hints=["send the arguments as an object"])
        unknown = sorted(k for k in args if k not in self.fields)
        if unknown:
            raise self._error(
                f"{self.tool}: unknown field {unknown[0]!r}", ["/" + k for k in unknown],
                details={"tool": self.tool, "unknown_fields": unknown, "allowed_fields": sorted(self.fields)},
                hints=[f"remove {', '.join(unknown)}; the input schema is closed"],
            )
        if self.passes(args):
            return
        errors = sorted(self.validator.iter_errors(args), key=lambda e: list(e.absolute_path))
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path)
        if first.validator == "required":
            # the missing name is the first required property absent from the object that failed
            have = first.instance if isinstance(first.instance, Mapping) else {}
            missing = next((r for r in first.validator_value if r not in have), None)
            name = f"{where}/{missing}" if where else str(missing)
            message = f"{self.tool}: missing required field {name!r}"
        else:
            name = where or None
            message = f"{self.tool}: field {where or '(root)'}: {first.message}"
        paths = ["/" + "/".join(str(p) for p in e.absolute_path) for e in errors]
        if first.validator == "required":
            paths[0] = "/" + str(name)
        raise self._error(
            message[:MAX_MESSAGE], paths,
            details={"tool": self.tool, "field": name,
                     "errors": [{"path": p, "message": e.message[:200]}
                                for p, e in zip(paths[:MAX_LISTED_ERRORS], errors)]},
            hints=["check the tool's inputSchema in tools/list"],
        )

    def _error(self, message: str, paths: list[str], *, details: dict[str, Any], hints: list[str]) -> DomeError:
        code = input_error_code(self.contract_id, paths) if self.contract_id else None
        if code is None:
            return ToolInputError(message, details=details, hints=hints)
        return DomeError(message, code=code, details=details, hints=hints, retry="none")


@dataclass
class MethodStats:
    calls: int = 0
    ok: int = 0
    errors: int = 0
    retries: int = 0
    total_ms: float = 0.0
    max_ms: float = 0.0
    last_error: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"calls": self.calls, "ok": self.ok, "errors": self.errors, "retries": self.retries,
                "mean_ms": round(self.total_ms / self.calls, 3) if self.calls else 0.0,
                "max_ms": round(self.max_ms, 3), "last_error": self.last_error}


@dataclass
class CallStats:
    """Per-tool call outcomes in memory: no I/O, so it costs a small call nothing it would notice."""

    requests: int = 0
    successes: int = 0
    errors: int = 0
    retries: int = 0
    methods: dict[str, MethodStats] = field(default_factory=dict)
    last_method_error: dict[str, Any] | None = None

    def call(self, tool: str, *, ok: bool, ms: float, error: Mapping[str, Any] | None = None,
             retries: int = 0) -> None:
        self.requests += 1
        stats = self.methods.get(tool)
        if stats is None:
            stats = self.methods[tool] = MethodStats()
        stats.calls += 1
        stats.total_ms += ms
        if ms > stats.max_ms:
            stats.max_ms = ms
        stats.retries += retries
        self.retries += retries
        if ok:
            self.successes += 1
            stats.ok += 1
        else:
            self.errors += 1
            stats.errors += 1
            short = {"code": (error or {}).get("code"), "message": (error or {}).get("message"),
                     "category": (error or {}).get("category")}
            stats.last_error = short
            self.last_method_error = {"tool": tool, **short}

    def calls_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "successes": self.successes, "errors": self.errors,
                "retries": self.retries,
                "methods": {k: v.to_json() for k, v in sorted(self.methods.items())},
                "last_method_error": self.last_method_error}
