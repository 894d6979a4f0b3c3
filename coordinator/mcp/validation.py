"""Closed input schemas, compiled once per tool.

The fast path is a set difference (unknown fields, named) and one compiled
`is_valid`; the full error list is computed only for a request that fails.
"""
from __future__ import annotations

from typing import Any, Mapping

from jsonschema import Draft202012Validator

from registry.errors import DomeError
from registry.input_codes import input_error_code

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
            raise self._error(
                f"{self.spec.name}: unknown field {unknown[0]!r}", ["/" + k for k in unknown],
                details={"tool": self.spec.name, "unknown_fields": unknown, "allowed_fields": sorted(self.fields)},
                hints=[f"remove {', '.join(unknown)}; the input schema is closed"],
            )
        if self.validator.is_valid(args):
            return
        errors = sorted(self.validator.iter_errors(args), key=lambda e: list(e.absolute_path))
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path)
        if first.validator == "required":
            # the missing name is the first required property absent from the object that failed
            have = first.instance if isinstance(first.instance, Mapping) else {}
            missing = next((r for r in first.validator_value if r not in have), None)
            field = f"{where}/{missing}" if where else str(missing)
            message = f"{self.spec.name}: missing required field {field!r}"
        else:
            field = where or None
            message = f"{self.spec.name}: field {where or '(root)'}: {first.message}"
        paths = ["/" + "/".join(str(p) for p in e.absolute_path) for e in errors]
        if first.validator == "required":
            paths[0] = "/" + str(field)
        raise self._error(
            message[:300], paths,
            details={"tool": self.spec.name, "field": field,
                     "errors": [{"path": p, "message": e.message[:200]} for p, e in zip(paths[:10], errors)]},
            hints=["check the tool's inputSchema in tools/list"],
        )

    def _error(self, message: str, paths: list[str], *, details: dict[str, Any], hints: list[str]) -> DomeError:
        """A contract with its own input codes (the KLayout one) gets them; the rest SCHEMA_VALIDATION_ERROR."""
        code = input_error_code(self.spec.contract_id, paths)
        if code is None:
            return ToolInputError(message, details=details, hints=hints)
        return DomeError(message, code=code, details=details, hints=hints, retry="none")
