"""The worker intent registry: intent name -> handler, imported lazily.

A handler is `handler(ctx: IntentContext) -> IntentResult`. It works in
`ctx.scratch` (a checkout of the exact base commit); whatever it leaves
changed there becomes the PatchProposal. It reports progress through
`ctx.progress(fraction, message)` (a heartbeat on the gateway), stores large
outputs with `ctx.put_artifact(data, media_type) -> digest`, and checks
`ctx.token` in long loops. A failure is a raised DomeError (typed code).

Domain intents (litho.*, drc.*) live in their own packages and are listed
here so that the worker runtime and validation suites find them by name
without importing them up front.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from registry.errors import DomeError
from registry.intents import INTENTS, SUITES  # one table with the coordinator, which checks queues at load

from ..cancel import CancellationToken


class UnknownIntent(DomeError):
    code = "UNKNOWN_INTENT"


class IntentFailed(DomeError):
    code = "INTENT_FAILED"


@dataclass
class IntentContext:
    scratch: Path
    action: dict[str, Any]
    seed: int
    token: CancellationToken
    progress: Callable[[float, str], None] = lambda fraction, message="": None
    put_artifact: Callable[[bytes, str], str] = lambda data, media_type="application/octet-stream": ""
    limits: dict[str, Any] = field(default_factory=dict)
    gateway: Any = None  # the attempt's GatewayClient (its grant signs egress requests: the agent intent)


@dataclass
class IntentResult:
    summary: dict[str, Any] = field(default_factory=dict)
    evidence: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)


def _load(table: dict[str, str], name: str, kind: str) -> Callable[[IntentContext], IntentResult]:
    target = table.get(name)
    if target is None:
        raise UnknownIntent(f"no {kind} named {name!r}", details={"name": name, "known": sorted(table)})
    module, _, func = target.partition(":")
    try:
        return getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as exc:
        raise UnknownIntent(f"{kind} {name!r} is not available in this build: {exc}",
                            code="INTENT_UNAVAILABLE", details={"name": name, "target": target}) from exc


WORK_QUEUE_ACTION_KEYS = frozenset({"intent", "suite", "params", "argv", "env", "ok_exit_codes"})


def handler_action(action: dict[str, Any]) -> dict[str, Any]:
    """What a handler reads. A work queue nests an intent's or a domain suite's
    own inputs under `params` (the action_spec and suite schemas are closed);
    handlers see them flattened beside `intent`, `argv` and `env`. An action
    that already carries handler fields at the top level is passed through, so
    a handler field that is itself named `params` (a DRC deck's parameters)
    keeps its meaning. The suite's name is dome's business and is dropped."""
    if not set(action) <= WORK_QUEUE_ACTION_KEYS:
        return {k: v for k, v in action.items() if k != "suite"}
    out = {k: v for k, v in action.items() if k not in ("params", "suite")}
    params = action.get("params") or {}
    clash = sorted(set(out) & set(params))
    if clash:
        raise IntentFailed("a parameter is given both in params and beside it", code="INTENT_PARAMS_CLASH",
                           details={"fields": clash})
    out.update(params)
    return out


def resolve(intent: str) -> Callable[[IntentContext], IntentResult]:
    return _load(INTENTS, intent, "intent")


def resolve_suite(suite: str) -> Callable[[IntentContext], IntentResult]:
    return _load(SUITES, suite, "validation suite")
