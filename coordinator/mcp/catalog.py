"""The tool catalog: MCP tool descriptors from the registry contracts.

Every tool the host serves is a method of a contract in registry/tools/
(contract_id, version, methods with request/response schemas, replay
contract, capability class, side effects). The same files feed
`dome registry openrpc`, so tools/list and the OpenRPC document cannot drift.

The host adds two envelope fields of its own to each published input schema:
`render` (porcelain | json) on every tool and `wait` on long-running tools.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Any

TOOLS_DIR = Path(__file__).resolve().parents[2] / "registry" / "tools"
TEST_TOOLS_ENV = "DOME_MCP_TEST_TOOLS"
TEST_CONTRACT = "dome.mcp_testing"
SCHEMA_VERSION = "1.0.0"

RENDER_FIELD = {"enum": ["porcelain", "json"], "default": "porcelain",
                "description": "text content: porcelain (line-oriented summary, default) or json"}
WAIT_FIELD = {"type": "boolean", "default": True,
              "description": "true: wait for the result (with progress); false: return job_id at once, then poll"}
ENVELOPE_FIELDS = ("render", "wait")


class Replay(str, Enum):
    CONVERGENT = "Convergent"
    PROBE_REQUIRED = "ProbeRequired"
    NEVER_REPLAY = "NeverReplay"


@dataclass(frozen=True)
class ToolSpec:
    name: str
    contract_id: str
    contract_version: str
    title: str
    description: str
    request: dict[str, Any]  # the contract's closed request schema
    response: dict[str, Any]
    replay: Replay
    served_by: str  # "host" | "worker"
    capability: str = "read"  # read | write | admin
    side_effect: str = "none"
    destructive: bool = False
    idempotent: bool = True
    long_running: bool = False
    aliases: tuple[str, ...] = ()
    capabilities: dict[str, Any] | None = None
    input_schema: dict[str, Any] = field(default_factory=dict)  # request + host envelope

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(self.input_schema.get("properties", {}))

    def descriptor(self) -> dict[str, Any]:
        """The MCP Tool object (tools/list entry)."""
        meta: dict[str, Any] = {
            "dome/contract": f"{self.contract_id}@{self.contract_version}",
            "dome/replay": self.replay.value,
            "dome/capability": self.capability,
            "dome/long_running": self.long_running,
        }
        if self.capabilities is not None:
            meta["dome/capabilities"] = self.capabilities
        desc = self.description
        if self.capabilities is not None:
            # Planners that read only the description still see the matrix (RFC 0006 section 3).
            desc += " Capabilities: " + json.dumps(self.capabilities, sort_keys=True, separators=(",", ":"))
        return {
            "name": self.name,
            "title": self.title,
            "description": desc,
            "inputSchema": self.input_schema,
            "outputSchema": self.response,
            "annotations": {
                "title": self.title,
                "readOnlyHint": self.capability == "read" and self.side_effect in ("none", "session"),
                "destructiveHint": self.destructive,
                "idempotentHint": self.idempotent,
                "openWorldHint": False,
            },
            "_meta": meta,
        }


def _input_schema(request: dict[str, Any], long_running: bool) -> dict[str, Any]:
    schema = json.loads(json.dumps(request))
    schema.setdefault("type", "object")
    schema["additionalProperties"] = False
    props = schema.setdefault("properties", {})
    props["render"] = RENDER_FIELD
    if long_running:
        props["wait"] = WAIT_FIELD
    return schema


def _resolve_schema(value: Any) -> dict[str, Any]:
    """A method's schema inline, or by name in the schema store (`{"$schema_name": "litho/evaluate_request"}`)."""
    if isinstance(value, dict) and "$schema_name" in value:
        from registry.schema_store import load_schema
        try:
            return load_schema(value["$schema_name"])
        except Exception:
            return value.get("fallback", {"type": "object"})
    return value


def load_contracts(tools_dir: Path = TOOLS_DIR) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(tools_dir.glob("*.json"))]


def specs_from_contracts(contracts: list[dict[str, Any]], *, include_test: bool) -> dict[str, ToolSpec]:
    out: dict[str, ToolSpec] = {}
    for c in contracts:
        if c["contract_id"] == TEST_CONTRACT and not include_test:
            continue
        if c.get("served_by") not in ("host", "worker"):
            continue  # contracts served elsewhere (the worker gateway's own methods)
        for m in c["methods"]:
            request = _resolve_schema(m["request"])
            lr = bool(m.get("long_running"))
            spec = ToolSpec(
                name=m["name"], contract_id=c["contract_id"], contract_version=c["version"],
                title=m.get("title", m["name"]), description=m["description"], request=request,
                response=_resolve_schema(m.get("response") or {"type": "object"}),
                replay=Replay(m.get("replay", "NeverReplay")), served_by=c["served_by"],
                capability=m.get("capability", "read"), side_effect=m.get("side_effect", "none"),
                destructive=bool(m.get("destructive")), idempotent=bool(m.get("idempotent", True)),
                long_running=lr, aliases=tuple(m.get("aliases", ())), capabilities=m.get("capabilities"),
                input_schema=_input_schema(request, lr),
            )
            if spec.name in out:
                raise ValueError(f"tool {spec.name!r} defined twice")
            out[spec.name] = spec
    return out


@lru_cache(maxsize=2)
def default_specs(include_test: bool | None = None) -> dict[str, ToolSpec]:
    if include_test is None:
        include_test = os.environ.get(TEST_TOOLS_ENV) == "1"
    return specs_from_contracts(load_contracts(), include_test=include_test)
