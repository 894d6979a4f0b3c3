"""The worker gateway's tool table, on the dispatch core the MCP front door shares.

A ToolSpec is a name, a closed input schema, a side-effect class and a
handler `handler(args, call) -> dict`. Validation, error shaping and call
stats come from coordinator/toolcore.py, so a malformed call gets the same
code here as through `dome mcp` (INVALID_REQUEST, naming the field), and an
unexpected exception is INTERNAL_ERROR on both. Authorization is not here:
the gateway server wraps each handler in the grant verifier's transaction.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from registry.contracts import UnknownTool

from ..toolcore import CallStats, InputSchema, error_object


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: Mapping[str, Any]
    handler: Callable[[dict[str, Any], Any], dict[str, Any]]
    side_effect: str = "none"  # none | artifact_put | proposal_register | task_result
    capability_class: str = "write"
    contract_id: str | None = None  # a contract with input codes of its own gets them (registry.input_codes)
    schema: InputSchema = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "schema", InputSchema(self.name, self.input_schema, self.contract_id))

    @property
    def writes(self) -> bool:
        return self.side_effect != "none"


@dataclass(frozen=True)
class CallOutcome:
    ok: bool
    result: dict[str, Any]


class ToolDispatcher:
    def __init__(self, specs: Iterable[ToolSpec]) -> None:
        self.specs: dict[str, ToolSpec] = {s.name: s for s in specs}
        self.stats = CallStats()

    def visible(self, allowed: Iterable[str]) -> list[ToolSpec]:
        allowed = set(allowed)
        return [s for name, s in sorted(self.specs.items()) if name in allowed]

    def validate(self, name: str, args: Any) -> ToolSpec:
        spec = self.specs.get(name)
        if spec is None:
            raise UnknownTool(f"no tool named {name!r}", details={"tool": name},
                              hints=["call tools/list for the tools your grant allows"])
        spec.schema.validate(args if args is not None else {})
        return spec

    def call(self, name: str, args: Any, call: Any = None) -> CallOutcome:
        """Validate and run a tool with no authorization wrapper (the gateway server adds its own)."""
        return self.guard(lambda: self.validate(name, args).handler(dict(args or {}), call), tool=name)

    def guard(self, fn: Callable[[], dict[str, Any]], *, tool: str = "?") -> CallOutcome:
        """Run fn; any exception becomes an ErrorObject outcome. The outcome is counted in `stats`."""
        t0 = time.perf_counter()
        try:
            outcome = CallOutcome(True, fn())
        except Exception as exc:  # noqa: BLE001 - shaped into an ErrorObject
            outcome = CallOutcome(False, error_object(exc))
        self.stats.call(tool, ok=outcome.ok, ms=(time.perf_counter() - t0) * 1e3,
                        error=None if outcome.ok else outcome.result)
        return outcome
