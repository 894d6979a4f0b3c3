"""Schema-validated tool dispatch with typed error shaping (transport-free).

A ToolSpec is a name, a closed input schema, a side-effect class and a
handler `handler(args, call) -> dict`. `ToolDispatcher.call` validates the
arguments against the schema, runs the handler, and turns any DomeError
into an ErrorObject (`{code, message, details, hints, retry}`); unexpected
exceptions become INTERNAL. Nothing here knows about MCP, HTTP, grants or
the ledger, so the worker gateway and the MCP front door can share it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from jsonschema import Draft202012Validator

from registry.contracts import UnknownTool
from registry.errors import DomeError

log = logging.getLogger("dome.gateway")


class ToolInputInvalid(DomeError):
    code = "INVALID_REQUEST"


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: Mapping[str, Any]
    handler: Callable[[dict[str, Any], Any], dict[str, Any]]
    side_effect: str = "none"  # none | artifact_put | proposal_register | task_result
    capability_class: str = "write"
    validator: Draft202012Validator = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "validator", Draft202012Validator(dict(self.input_schema)))

    @property
    def writes(self) -> bool:
        return self.side_effect != "none"


@dataclass(frozen=True)
class CallOutcome:
    ok: bool
    result: dict[str, Any]


def error_object(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, DomeError):
        return exc.to_object()
    log.exception("tool handler failed")
    return {"code": "INTERNAL_ERROR", "message": f"internal error: {type(exc).__name__}", "details": {},
            "hints": ["see the coordinator log"], "retry": "light"}


class ToolDispatcher:
    def __init__(self, specs: Iterable[ToolSpec]) -> None:
        self.specs: dict[str, ToolSpec] = {s.name: s for s in specs}

    def visible(self, allowed: Iterable[str]) -> list[ToolSpec]:
        allowed = set(allowed)
        return [s for name, s in sorted(self.specs.items()) if name in allowed]

    def validate(self, name: str, args: Any) -> ToolSpec:
        spec = self.specs.get(name)
        if spec is None:
            raise UnknownTool(f"no tool named {name!r}", details={"tool": name})
        errors = sorted(spec.validator.iter_errors(args if args is not None else {}), key=lambda e: list(e.path))
        if errors:
            raise ToolInputInvalid(
                f"{name}: {errors[0].message}",
                details={"tool": name, "errors": [{"path": "/" + "/".join(map(str, e.path)),
                                                   "message": e.message} for e in errors]},
                hints=["the tool's input schema is closed: send only the fields it defines"])
        return spec

    def call(self, name: str, args: Any, call: Any = None) -> CallOutcome:
        """Validate and run a tool with no authorization wrapper (the front door adds its own)."""
        return self.guard(lambda: self.validate(name, args).handler(dict(args or {}), call))

    @staticmethod
    def guard(fn: Callable[[], dict[str, Any]]) -> CallOutcome:
        """Run fn; any exception becomes an ErrorObject outcome."""
        try:
            return CallOutcome(True, fn())
        except Exception as exc:  # noqa: BLE001 - shaped into an ErrorObject
            return CallOutcome(False, error_object(exc))
