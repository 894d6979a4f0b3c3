"""The runtime card of a model-driven agent (the `agent` intent), pure.

A card is data in the work queue (`action_spec.params.card`): which client
SDK and version the worker must run, which model, how it talks (timeouts,
retries, the output cap per call), and what the grant lets it reach:

    {"runtime_id": "openai-chat", "sdk": {"package": "openai", "version": "3.54.0"},
     "model": "gpt-x", "endpoint": {"host": "api.example.com", "base_path": "/v1"},
     "transport": {"timeout_s": 60, "max_retries": 0},
     "allow_models": ["gpt-x"], "budgets": {"max_tokens": 20000, "max_model_cost_micros": 50000},
     "max_turns": 12, "max_output_tokens": 1024, "temperature": 0, "seed": 7}

The coordinator reads the card once, at grant issuance: the host, the model
allowlist and the token and cost budgets go into the signed ToolProfile
(`constraints.network.allow_hosts`, `constraints.network.allow_models`,
`budgets.max_tokens`, `budgets.max_model_cost_micros`). The egress gate
trusts only the grant; the worker reads the card to build its client. No
credential is ever part of a card: the key for a host is configured on the
coordinator's side (coordinator/egress), by host name and env-var name.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from jsonschema import Draft202012Validator

from .errors import DomeError

HOST_RE = r"^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$"

CARD_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "required": ["runtime_id", "sdk", "model", "endpoint", "allow_models", "budgets"],
    "properties": {
        "runtime_id": {"type": "string", "pattern": "^[a-z0-9][a-z0-9._-]{0,63}$"},
        "sdk": {"type": "object", "additionalProperties": False, "required": ["package", "version"],
                "properties": {"package": {"type": "string",
                                           "pattern": "^(npm:@?[a-z0-9._/-]{1,200}|[A-Za-z0-9][A-Za-z0-9._-]{0,99})$"},
                               "version": {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+){1,3}$"},
                               "install_dir": {"type": "string", "pattern": r"^(/[A-Za-z0-9_][A-Za-z0-9._-]*)+$",
                                               "description": "where an agent CLI's package is installed (a Python "
                                                              "virtual environment, or an npm prefix); its version "
                                                              "is read there"}}},
        "model": {"type": "string", "minLength": 1, "maxLength": 200},
        "endpoint": {"type": "object", "additionalProperties": False, "required": ["host"],
                     "properties": {"host": {"type": "string", "pattern": HOST_RE},
                                    "base_path": {"type": "string", "pattern": "^/[A-Za-z0-9._/-]*$"}}},
        "transport": {"type": "object", "additionalProperties": False,
                      "properties": {"timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600},
                                     "max_retries": {"type": "integer", "minimum": 0, "maximum": 5}}},
        "allow_models": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
        "extra_hosts": {"type": "array", "items": {"type": "string", "pattern": HOST_RE},
                        "description": "further hosts the grant allows (the gate still needs a route for each)"},
        "budgets": {"type": "object", "additionalProperties": False, "required": ["max_tokens"],
                    "properties": {"max_tokens": {"type": "integer", "minimum": 0},
                                   "max_model_cost_micros": {"type": "integer", "minimum": 0}}},
        "max_turns": {"type": "integer", "minimum": 1, "maximum": 200},
        "max_output_tokens": {"type": "integer", "minimum": 1},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "seed": {"type": "integer"},
        "system": {"type": "string", "maxLength": 20000},
        "cli": {"type": "object", "additionalProperties": False, "required": ["argv"],
                "description": "run this agent CLI instead of the built-in loop, pointed at the gate through a loopback shim",
                "properties": {"argv": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                               "env": {"type": "object", "additionalProperties": {"type": "string"}}}},
    },
}
_VALIDATOR = Draft202012Validator(CARD_SCHEMA)


class RuntimeCardInvalid(DomeError):
    code = "RUNTIME_CARD_INVALID"


def check_card(card: Any) -> dict[str, Any]:
    """The card, validated (closed schema; the model must be on its own allowlist)."""
    errors = sorted(_VALIDATOR.iter_errors(card), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        raise RuntimeCardInvalid(f"runtime card: {e.message}", details={
            "path": "/" + "/".join(map(str, e.path)), "errors": len(errors)})
    if "cli" not in card and card["sdk"]["package"] != "openai":
        raise RuntimeCardInvalid("runtime card: the built-in agent loop runs the openai SDK; other packages need `cli`",
                                 details={"package": card["sdk"]["package"]})
    if "install_dir" in card["sdk"] and "cli" not in card:
        raise RuntimeCardInvalid("runtime card: sdk.install_dir names where an agent CLI is installed; it needs `cli`",
                                 details={"sdk": card["sdk"]})
    if any(part == ".." for part in card["sdk"].get("install_dir", "").split("/")):
        raise RuntimeCardInvalid("runtime card: sdk.install_dir must not contain ..", details={"sdk": card["sdk"]})
    if card["model"] not in card["allow_models"]:
        raise RuntimeCardInvalid("runtime card: its model is not on its own allowlist",
                                 details={"model": card["model"], "allow_models": card["allow_models"]})
    return dict(card)


def grant_terms(card: Mapping[str, Any]) -> dict[str, Any]:
    """What the card puts into the signed grant: {allow_hosts, allow_models, budgets}."""
    c = check_card(card)
    hosts = sorted({c["endpoint"]["host"], *c.get("extra_hosts", [])})
    return {"allow_hosts": hosts, "allow_models": sorted(set(c["allow_models"])), "budgets": dict(c["budgets"])}


def normalize_host(value: str) -> str | None:
    """A Host header or authority -> a lower-case host name without port, or None when malformed."""
    host = (value or "").strip().lower()
    if host.startswith("["):
        return None  # IP literals are never an allowed name
    host = host.rsplit(":", 1)[0] if re.fullmatch(r".+:[0-9]{1,5}", host) else host
    host = host.rstrip(".")
    return host if re.fullmatch(HOST_RE, host) else None
