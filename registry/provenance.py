"""The standard provenance block of a tool result, built in one place.

Every structured result of a tool (the litho engine's evaluate, simulate and
optimize, the KLayout tools, the MCP host's own tools) carries a
`provenance` object with at least these keys:

    seed             the seed the result depends on, or null
    engine_versions  {component: version} of what computed it
    inputs_hash      digest of the request (delivery fields such as `render` left out)
    outputs_hash     digest of the result without its `provenance`
    revision_id      the revision the result is about (a run's head commit), or null

`revision_id` names a git revision when the result is about one (a run's
head, `revision_id` / `head_sha` / `head` in the result). A tool result does
not know which registry commit its contract was loaded from (an installed
package has no registry repository beside it), so it is null there; the
pinned contract commit of a worker's tools is in its grant instead.

`standard_block` builds the block; `stamp` adds it (and `schema_version`) to
a result that has neither; `complete` merges it into a result that already
carries its engine's own provenance (the litho engine's model, kernels and
layout digests), so the engine's keys and the standard ones sit side by
side. All three are pure and deterministic: no clocks, no hostnames, so the
CLI, an in-process call and a worker subprocess yield the same bytes.
"""
from __future__ import annotations

from typing import Any, Mapping

from .canonical import digest_json

DEFAULT_SCHEMA_VERSION = "1.0.0"
# request fields that steer how a result is delivered, not what it is
DELIVERY_FIELDS = frozenset({"render", "wait"})
STANDARD_KEYS = ("seed", "engine_versions", "inputs_hash", "outputs_hash", "revision_id")


def inputs_hash(request: Mapping[str, Any]) -> str:
    return digest_json({k: v for k, v in request.items() if k not in DELIVERY_FIELDS})


def standard_block(result: Mapping[str, Any], request: Mapping[str, Any], *, tool: str,
                   engine_versions: Mapping[str, str] | None = None, seed: Any = None) -> dict[str, Any]:
    """The standard keys for `result` (its `provenance`, if any, is not hashed)."""
    body = {k: v for k, v in result.items() if k != "provenance"}
    block: dict[str, Any] = {
        "tool": tool,
        "seed": seed if seed is not None else request.get("seed"),
        "engine_versions": dict(sorted((engine_versions or {}).items())),
        "inputs_hash": inputs_hash(request),
        "outputs_hash": digest_json(body),
    }
    run_id = request.get("run_id") or result.get("run_id")
    if run_id is not None:
        block["run_id"] = run_id
    # always present, null when the result is about no revision: every block has the same keys
    block["revision_id"] = result.get("revision_id") or result.get("head_sha") or result.get("head")
    return block


def stamp(result: Mapping[str, Any], request: Mapping[str, Any], *, tool: str,
          engine_versions: Mapping[str, str] | None = None,
          schema_version: str = DEFAULT_SCHEMA_VERSION) -> dict[str, Any]:
    """Return `result` with schema_version and provenance; unchanged when both are present."""
    out = dict(result)
    if "schema_version" in out and isinstance(out.get("provenance"), dict):
        return out
    out.setdefault("schema_version", schema_version)
    out["provenance"] = standard_block(out, request, tool=tool, engine_versions=engine_versions)
    return out


def complete(result: dict[str, Any], request: Mapping[str, Any], *, tool: str,
             engine_versions: Mapping[str, str], seed: Any = None) -> dict[str, Any]:
    """`result` with the standard keys merged into its own `provenance` (the engine's keys kept)."""
    own = result.get("provenance")
    block = standard_block(result, request, tool=tool, engine_versions=engine_versions, seed=seed)
    result["provenance"] = {**(own if isinstance(own, dict) else {}), **block}
    return result
