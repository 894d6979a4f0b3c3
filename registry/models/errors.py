"""The ErrorObject wire form (registry.errors.DomeError.to_object())."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .base import OpenModel


class ErrorObjectModel(OpenModel):
    code: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$")
    message: str
    details: dict[str, Any]
    hints: list[str]
    retry: Literal["none", "light", "heavy"]
