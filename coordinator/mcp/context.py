"""What a host tool handler is given: the call's context, and the handler and progress types.

Its own module so that the host (dispatch.py) and the handler modules it
loads (orchestration.py, conformance.py) all import it and none imports
another: the host imports the handlers, never the other way round.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from .catalog import ToolSpec
from .identity import Client

Progress = Callable[[float, float | None, str | None], Awaitable[None]]


@dataclass
class CallContext:
    host: Any  # the ToolHost (dispatch.py); typed loosely so this module needs nothing of the host
    spec: ToolSpec
    progress: Progress | None = None
    notes: list[str] = field(default_factory=list)
    job_id: str | None = None
    content: list[dict[str, Any]] = field(default_factory=list)  # extra content a handler returns
    client: Client | None = None  # who is calling (None: an in-process caller, treated as the operator)


Handler = Callable[[dict[str, Any], CallContext], Awaitable[dict[str, Any]]]
