"""Typed errors shared by every layer of dome.

Every failure a user, an agent or a worker can see is a DomeError with a
stable machine code, a one-line message, structured details, hints that
say what to do next, and a retry hint (none | light | heavy). The wire
form is the ErrorObject schema (registry/schemas/error_object.json).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

RetryHint = Literal["none", "light", "heavy"]


class DomeError(Exception):
    """Base class: subclasses fix `code` (and usually `retry`)."""

    code: str = "DOME_ERROR"
    retry: RetryHint = "none"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        details: dict[str, Any] | None = None,
        hints: list[str] | tuple[str, ...] = (),
        retry: RetryHint | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if retry is not None:
            self.retry = retry
        self.details: dict[str, Any] = dict(details or {})
        self.hints: list[str] = list(hints)

    def to_object(self) -> dict[str, Any]:
        """The ErrorObject form: what goes on the wire and into the ledger."""
        return {
            "code": self.code,
            "message": self.message,
            "details": self.details,
            "hints": self.hints,
            "retry": self.retry,
        }

    def __str__(self) -> str:  # pragma: no cover - trivial
        return f"{self.code}: {self.message}"


@dataclass(frozen=True)
class ErrorObject:
    """A parsed ErrorObject, for code that receives errors off the wire."""

    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)
    hints: tuple[str, ...] = ()
    retry: RetryHint = "none"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ErrorObject":
        return cls(
            code=str(data["code"]),
            message=str(data["message"]),
            details=dict(data.get("details") or {}),
            hints=tuple(data.get("hints") or ()),
            retry=data.get("retry", "none"),
        )

    def raise_(self) -> None:
        raise DomeError(self.message, code=self.code, details=self.details,
                        hints=self.hints, retry=self.retry)


class CanonicalizationError(DomeError):
    code = "CANONICALIZATION_ERROR"


class SignatureError(DomeError):
    """A signature or envelope failed to verify; `code` says which check."""

    code = "SIGNATURE_INVALID"


class SchemaValidationError(DomeError):
    code = "SCHEMA_VALIDATION_ERROR"
