"""Closed input schemas, compiled once per tool.

The fast path is a set difference (unknown fields, named) and one compiled
`is_valid`; the full error list is computed only for a request that fails.
"""
from __future__ import annotations

from typing import Any, Mapping

from jsonschema import Draft202012Validator

from .catalog import ToolSpec
from .faults import ToolInputError


class CompiledTool:
    __slots__ = ("spec", "fields", "required", "validator")

    def __init__(self, spec: ToolSpec) -> None:
        Draft202012Validator.check_schema(spec.input_schema)
        self.spec = spec
        self.fields = spec.fields
        self.required = tuple(spec.input_schema.get("required", ()))
        self.validator = Draft202012Validator(spec.input_schema)

    def validate(self, args: Mapping[str, Any]) -> None:
        unknown = sorted(k for k in args if k not in self.fields)
        if unknown:
            raise ToolInputError(
                f"{self.spec.name}: unknown field {unknown[0]!r}",
                details={"tool": self.spec.name, "unknown_fields": unknown, "allowed_fields": sorted(self.fields)},
                hints=[f"remove {', '.join(unknown)}; the input schema is closed"],
            )
        if self.validator.is_valid(args):
            return
        errors = sorted(self.validator.iter_errors(args), key=lambda e: list(e.absolute_path))
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(root)"
        field = str(first.absolute_path[0]) if first.absolute_path else None
        if first.validator == "required":
            missing = [r for r in self.required if r not in args]
            field = missing[0] if missing else None
            message = f"{self.spec.name}: missing required field {field!r}"
        else:
            message = f"{self.spec.name}: field {where}: {first.message}"
        raise ToolInputError(
            message[:300],
            details={"tool": self.spec.name, "field": field,
                     "errors": [{"path": "/" + "/".join(str(p) for p in e.absolute_path), "message": e.message[:200]}
                                for e in errors[:10]]},
            hints=["check the tool's inputSchema in tools/list"],
        )
