"""Typed operational faults of the MCP host.

A fault has a category from the hardened-host taxonomy; the category fixes
how the host reacts (retry, restart the worker, or neither), what health and
telemetry record, and how the model sees it: a concise message, the category,
a retry hint (none | light | heavy) and never raw backend output.

Domain errors (a KLayout SESSION_NOT_FOUND, a schema violation) are not
faults: they pass through as their contract ErrorObject. Schema violations
and unexpected exceptions are shaped by the dispatch core the worker gateway
shares (coordinator/toolcore.py): INVALID_REQUEST (or the contract's own
input code) and INTERNAL_ERROR, whichever door a call came through.
"""
from __future__ import annotations

from enum import Enum
from typing import Any

from registry.contracts import UnknownTool  # noqa: F401 - one class for an unknown tool, re-exported here
from registry.errors import DomeError, RetryHint


class FaultCategory(str, Enum):
    TRANSPORT = "transport"
    PROCESS = "process"
    PROTOCOL = "protocol"
    TIMEOUT = "timeout"
    DOWNSTREAM_RESPONSE = "downstream_response"
    RESOURCE_EXHAUSTION = "resource_exhaustion"
    REPLAY_EXHAUSTION = "replay_exhaustion"
    ROLLOUT_DISRUPTION = "rollout_disruption"
    INVARIANT_BREACH = "invariant_breach"


# category -> (error code, retry hint, restart the worker?)
POLICY: dict[FaultCategory, tuple[str, RetryHint, bool]] = {
    FaultCategory.TRANSPORT: ("WORKER_TRANSPORT_FAULT", "light", True),
    FaultCategory.PROCESS: ("WORKER_PROCESS_FAULT", "light", True),
    FaultCategory.PROTOCOL: ("WORKER_PROTOCOL_FAULT", "light", True),
    FaultCategory.TIMEOUT: ("TOOL_TIMEOUT", "heavy", True),
    FaultCategory.DOWNSTREAM_RESPONSE: ("DOWNSTREAM_RESPONSE_FAULT", "none", False),
    FaultCategory.RESOURCE_EXHAUSTION: ("RESOURCE_EXHAUSTED", "heavy", True),
    FaultCategory.REPLAY_EXHAUSTION: ("REPLAY_EXHAUSTED", "heavy", False),
    FaultCategory.ROLLOUT_DISRUPTION: ("ROLLOUT_DISRUPTED", "light", True),
    FaultCategory.INVARIANT_BREACH: ("INVARIANT_BREACH", "none", False),
}

MAX_MESSAGE = 200


def concise(text: str, limit: int = MAX_MESSAGE) -> str:
    """One line, bounded: what a model reads instead of a backend dump."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


class Fault(DomeError):
    """An operational fault: typed category, restart policy, model-shaped message."""

    def __init__(self, category: FaultCategory, message: str, *, details: dict[str, Any] | None = None,
                 hints: list[str] | tuple[str, ...] = (), code: str | None = None,
                 retry: RetryHint | None = None) -> None:
        default_code, default_retry, restart = POLICY[category]
        super().__init__(concise(message), code=code or default_code, details=details, hints=hints,
                         retry=retry or default_retry)
        self.category = category
        self.restart = restart

    def to_object(self) -> dict[str, Any]:
        obj = super().to_object()
        obj["category"] = self.category.value
        return obj


class ConsentRequired(DomeError):
    code = "CONSENT_REQUIRED"
    retry = "none"


class ConsentInvalid(DomeError):
    code = "CONSENT_INVALID"
    retry = "none"


class JobNotFound(DomeError):
    code = "JOB_NOT_FOUND"
    retry = "none"


class SessionNotFound(DomeError):
    """Worker state (a KLayout session) is gone and cannot be rebuilt."""

    code = "SESSION_NOT_FOUND"
    retry = "none"

