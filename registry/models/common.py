"""Shared object shapes of common.json: actions, budgets, evidence refs."""
from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from .base import Digest, DomeModel, Identifier, NonNegFloat, NonNegInt, OpenModel, ArtifactKind

_INTENT = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$"


class ActionSpec(DomeModel):
    """An intent-level action; `command` runs argv in the scratch checkout."""

    intent: str = Field(pattern=_INTENT)
    argv: list[str] | None = Field(default=None, min_length=1)
    env: dict[str, str] | None = None
    params: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _command_needs_argv(self) -> "ActionSpec":
        if self.intent == "command" and self.argv is None:
            raise ValueError("intent command needs argv")
        return self


class Budgets(DomeModel):
    max_calls: NonNegInt | None = None
    max_calls_by_method: dict[str, NonNegInt] | None = None
    max_calls_by_family: dict[str, NonNegInt] | None = None
    max_wall_seconds: NonNegFloat | None = None
    max_cpu_seconds: NonNegFloat | None = None
    max_tokens: NonNegInt | None = None
    max_cost: NonNegFloat | None = None
    max_retries: NonNegInt | None = None
    max_bytes: NonNegInt | None = None
    max_model_cost_micros: NonNegInt | None = None


class EvidenceRef(OpenModel):
    kind: ArtifactKind
    object_id: Identifier | None = None
    digest: Digest
    event_sequence: NonNegInt | None = None
    uri: str | None = None
