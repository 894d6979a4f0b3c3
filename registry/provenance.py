"""Provenance stamping shared by every path that emits a tool result.

A tool result is the contract JSON plus `schema_version` and `provenance`
(seed, engine versions, inputs hash, outputs hash, run or revision id). The
CLI (`--json`), the MCP worker and the MCP host all call `stamp`, and `stamp`
leaves an already-stamped result untouched, so every path yields the same
bytes for the same inputs. Pure and deterministic: no clocks, no hostnames.
"""
from __future__ import annotations

from typing import Any, Mapping

from .canonical import digest_json

DEFAULT_SCHEMA_VERSION = "1.0.0"
# request fields that steer how a result is delivered, not what it is
DELIVERY_FIELDS = frozenset({"render", "wait"})


def inputs_hash(request: Mapping[str, Any]) -> str:
    return digest_json({k: v for k, v in request.items() if k not in DELIVERY_FIELDS})


def stamp(result: Mapping[str, Any], request: Mapping[str, Any], *, tool: str,
          engine_versions: Mapping[str, str] | None = None,
          schema_version: str = DEFAULT_SCHEMA_VERSION) -> dict[str, Any]:
    """Return `result` with schema_version and provenance; unchanged when both are present."""
    out = dict(result)
    if "schema_version" in out and isinstance(out.get("provenance"), dict):
        return out
    out.setdefault("schema_version", schema_version)
    body = {k: v for k, v in out.items() if k != "provenance"}
    prov: dict[str, Any] = {
        "tool": tool,
        "seed": request.get("seed"),
        "engine_versions": dict(sorted((engine_versions or {}).items())),
        "inputs_hash": inputs_hash(request),
        "outputs_hash": digest_json(body),
    }
    run_id = request.get("run_id") or out.get("run_id")
    if run_id is not None:
        prov["run_id"] = run_id
    # always present, null when the result is about no revision: every block has the same keys
    prov["revision_id"] = out.get("revision_id") or out.get("head_sha") or out.get("head")
    out["provenance"] = prov
    return out
