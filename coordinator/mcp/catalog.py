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
from typing import Any, Callable
from urllib.parse import urljoin

from .effects import TOOL_EFFECTS, capability, hints

TEST_CONTRACT_PATH = Path(__file__).resolve().parent / "testing" / "contract.json"
TEST_TOOLS_ENV = "DOME_MCP_TEST_TOOLS"
SCHEMA_VERSION = "1.0.0"

RENDER_FIELD = {"enum": ["porcelain", "json"], "default": "porcelain",
                "description": "text content: porcelain (line-oriented summary, default) or json"}
WAIT_FIELD = {"type": "boolean", "default": True,
              "description": "true: wait for the result (with progress); false: return job_id at once, then poll"}
OVERWRITE_FIELD = {"type": "boolean", "default": False,
                   "description": "replace an existing output file under the write roots (default: refuse)"}
ENVELOPE_FIELDS = ("render", "wait", "overwrite")  # the host's own fields beside the contract's


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
    output_schema: dict[str, Any] = field(default_factory=dict)
    method: str = ""  # the registry method name (MCP name may differ, e.g. promote -> run_promote)
    effects: frozenset[str] | None = None  # effects.TOOL_EFFECTS: the annotations and class derive from it

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
        if self.effects is not None:
            meta["dome/effects"] = sorted(self.effects)
        desc = self.description
        if self.capabilities is not None:
            # Planners that read only the description still see the matrix (RFC 0006 section 3),
            # in one line; the full object is in _meta["dome/capabilities"].
            desc += " " + capabilities_line(self.capabilities)
        return {
            "name": self.name,
            "title": self.title,
            "description": desc,
            "inputSchema": self.input_schema,
            "outputSchema": self.output_schema or self.response,
            "annotations": {
                **({"readOnlyHint": self.capability == "read" and self.side_effect == "none",
                    "destructiveHint": self.destructive, "idempotentHint": self.idempotent}
                   if self.effects is None else hints(self.effects)),
                "openWorldHint": False,
            },
            "_meta": meta,
        }


# What a model needs to know about a request field the contract schema leaves undescribed, by the
# field's path ("box.left" applies to every tool's box). The contract's own description always wins.
FIELD_DESCRIPTIONS: dict[str, str] = {
    "reason": "why the job is cancelled (recorded)",
    "since": "return events with a sequence number above this (0: from the start)",
    "limit": "at most this many items",
    "consent_token": "the run's consent token a person gave you (or a dct1.* host confirmation in lenient mode)",
    "seed": "random seed; the same seed and inputs give the same result",
    "executor": "where workers run: local (sandboxed processes) or ray",
    "mask_layer": "layer (number) of the mask in the mask layout",
    "fill": "how the layout's polygons are filled before simulation",
    "kernel_source": "which optical kernels to use",
    "device": "compute device: cpu or cuda[:N] (default: cuda when present, else cpu)",
    "report_level": "aggregate: metrics only; detailed: also violations[] (see the capabilities matrix)",
    "tile": "tile the layout: auto, always or never",
    "halo_nm": "tile halo in nanometres (optical context around each tile)",
    "violation_count_max": "above this many violations the result degrades to aggregate",
    "session_id": "session id returned by open_layout (litho: the violation-pin session)",
    "iterations": "ILT iterations",
    "violation_id": "fix one violation (and its group) from an earlier detailed evaluate",
    "scope": "what the optimisation may change around the violation",
    "layout_artifact_id": "a pinned layout id from evaluate(pin=true)",
    "mrc": "mask rule constraints applied during optimisation",
    "mrc.min_feature_nm": "smallest mask feature in nanometres",
    "mrc.halo_nm": "mask rule check halo in nanometres",
    "mrc.min_area_nm2": "smallest mask polygon area in square nanometres",
    "out_dir": "absolute folder the simulated images are written to",
    "target_id": "shape id (shp_...) from query_region",
    "target_ids": "shape ids (shp_...) from query_region",
    "cell": "cell name (default: the session's top cell or view)",
    "depth": "how many hierarchy levels below the cell to describe",
    "run_id": "DRC run id from run_drc_script (or a dome run id)",
    "include_crops": "also render a PNG crop around each marker",
    "crop_size_um": "crop size in microns",
    "crop_size_um.x": "crop width in microns",
    "crop_size_um.y": "crop height in microns",
    "max_depth": "deepest hierarchy level to list",
    "mode": "which measurement to take",
    "path": "absolute path of the layout file (gds or oas), under the allowed roots",
    "top_cell": "top cell to use (default: the first top cell by name)",
    "box": "region in microns, in the cell's frame",
    "box.left": "left edge in microns", "box.bottom": "bottom edge in microns",
    "box.right": "right edge in microns", "box.top": "top edge in microns",
    "layers": "layers to include (default: all)",
    "layers[].layer": "GDS layer number", "layers[].datatype": "GDS datatype", "layers[].name": "layer name",
    "hierarchy_mode": "flattened: shapes in the cell's frame; hierarchical: with instance paths",
    "max_shapes": "at most this many shapes in the response",
    "max_instances": "at most this many instances in the response",
    "image_size": "image size in pixels", "image_size.width": "image width in pixels",
    "image_size.height": "image height in pixels",
    "annotations": "outlines drawn over the render",
    "annotations[].kind": "annotation kind", "annotations[].target_ids": "shape ids to outline",
    "annotations[].color": "outline colour",
    "style": "render colour scheme",
    "script_path": "absolute path of the DRC deck (.drc/.lydrc Ruby, .py Python), under the allowed roots",
    "script_type": "ruby or python (default: from the file suffix)",
    "params": "deck parameters: names to string values ($name in Ruby, deck.params in Python)",
}
# keys that cost bytes in tools/list and tell a model nothing it needs to call a tool
_SCHEMA_NOISE = ("title", "examples", "$comment")


def _describe(schema: dict[str, Any], prefix: str = "") -> None:
    for name, sub in (schema.get("properties") or {}).items():
        if not isinstance(sub, dict):
            continue
        key = prefix + name
        if not sub.get("description") and key in FIELD_DESCRIPTIONS:
            sub["description"] = FIELD_DESCRIPTIONS[key]
        _describe(sub, key + ".")
        if isinstance(sub.get("items"), dict):
            _describe(sub["items"], key + "[].")


def _compact(schema: Any, *, keep_descriptions: bool) -> Any:
    """The schema without titles/examples (and, for output schemas, without prose)."""
    if isinstance(schema, list):
        return [_compact(x, keep_descriptions=keep_descriptions) for x in schema]
    if not isinstance(schema, dict):
        return schema
    drop = _SCHEMA_NOISE if keep_descriptions else (*_SCHEMA_NOISE, "description")
    out = {}
    for k, v in schema.items():
        if k in drop and not (k in ("title", "description") and isinstance(v, dict)):  # a property so named
            continue
        if k == "properties" and isinstance(v, dict):
            out[k] = {name: _compact(sub, keep_descriptions=keep_descriptions) for name, sub in v.items()}
        else:
            out[k] = _compact(v, keep_descriptions=keep_descriptions)
    return out


def capabilities_line(caps: dict[str, Any]) -> str:
    """The capabilities matrix as one line of prose: each engine path's detail support and its condition."""
    parts = []
    for path, entry in sorted((caps.get("engine_paths") or {}).items()):
        text = f"{path}={entry.get('detailed')}"
        pre = entry.get("precondition") or {}
        conds = [f"{k}<={v:g}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in pre.items()
                 if k.endswith("_max")]
        if conds:
            text += f" ({', '.join(conds)}; else {pre.get('on_exceeded', 'degraded')})"
        parts.append(text)
    return (f"Capabilities (schema {caps.get('schema_version')}): report_level "
            f"{'|'.join(caps.get('report_levels', []))}; detailed by engine path: {'; '.join(parts)}; "
            f"at most {caps.get('max_violations_per_response')} violations per response.")


def _input_schema(request: dict[str, Any], long_running: bool, *, overwrite: bool = False) -> dict[str, Any]:
    schema = _compact(json.loads(json.dumps(request)), keep_descriptions=True)
    _describe(schema)
    schema.setdefault("type", "object")
    schema["additionalProperties"] = False
    props = schema.setdefault("properties", {})
    props["render"] = RENDER_FIELD
    if long_running:
        props["wait"] = WAIT_FIELD
    if overwrite:
        props["overwrite"] = OVERWRITE_FIELD
    return schema


JOB_HANDLE = {"type": "object", "required": ["job_id", "status"]}
ERROR_RESULT = {"type": "object", "required": ["code", "message", "retry"]}
OUTPUT_DEPTH = 3  # output schemas in tools/list describe this many levels; the registry has the rest


def _shallow(schema: Any, depth: int) -> Any:
    """Response schemas are open: below `depth` levels only the type is published."""
    if not isinstance(schema, dict):
        return schema
    if depth <= 0:
        return {k: v for k, v in schema.items() if k in ("type", "enum")} or {}
    out = {}
    for k, v in schema.items():
        if k == "properties" and isinstance(v, dict):
            out[k] = {n: _shallow(sub, depth - 1) for n, sub in v.items()}
        elif k in ("items", "additionalProperties") and isinstance(v, dict):
            out[k] = _shallow(v, depth - 1)
        elif k in ("anyOf", "oneOf", "allOf") and isinstance(v, list):
            out[k] = [_shallow(x, depth) for x in v]
        else:
            out[k] = v
    return out


def _output_schema(response: dict[str, Any], long_running: bool) -> dict[str, Any]:
    """The contract response, or (wait=false) a job handle, or (isError) the ErrorObject.

    Error results carry the ErrorObject as structuredContent (the KLayout contract's rule);
    clients that validate every structured result against outputSchema accept it too.
    """
    out = _shallow(_compact(json.loads(json.dumps(response)), keep_descriptions=False), OUTPUT_DEPTH)
    out["type"] = "object"
    variants = [out, JOB_HANDLE, ERROR_RESULT] if long_running else [out, ERROR_RESULT]
    return {"type": "object", "anyOf": variants}


def inline_refs(schema: Any, base_id: str, lookup: Callable[[str], dict[str, Any]], _depth: int = 0) -> Any:
    """Return `schema` with every $ref replaced by its target, so MCP clients need no resolver."""
    if _depth > 40:
        raise ValueError("schema $ref nesting too deep")
    if isinstance(schema, list):
        return [inline_refs(x, base_id, lookup, _depth) for x in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        ref = schema["$ref"]
        url, _, pointer = ref.partition("#")
        target_id = urljoin(base_id, url) if url else base_id
        doc = lookup(target_id)
        node: Any = doc
        for part in [p for p in pointer.split("/") if p]:
            node = node[part.replace("~1", "/").replace("~0", "~")]
        merged = inline_refs(node, target_id, lookup, _depth + 1)
        extra = {k: v for k, v in schema.items() if k != "$ref"}
        return {**merged, **{k: inline_refs(v, base_id, lookup, _depth) for k, v in extra.items()}} if extra else merged
    return {k: inline_refs(v, base_id, lookup, _depth) for k, v in schema.items()
            if k not in ("$schema", "$id", "$defs")}


# MCP-facing aliases for contract methods (the registry names stay canonical)
ALIASES: dict[str, tuple[str, ...]] = {
    "evaluate": ("eval", "litho_evaluate", "litho.evaluate"),
    "optimize": ("ilt", "opc", "litho_optimize", "litho.optimize"),
    "simulate": ("sim", "litho_simulate", "litho.simulate"),
    "open_layout": ("open", "load_layout"), "close_session": ("close",), "query_region": ("query",),
    "measure_geometry": ("measure",), "render_view": ("render",), "run_drc_script": ("drc", "run_drc"),
    "extract_markers": ("markers",),
}
SERVED_BY = {"mcp_front": "host", "litho": "worker", "klayout_observer": "worker"}
# RFC 0006 section 3: the per-engine-path detail matrix, published on the litho tools' descriptors.
# The litho engine's own data (registry/tools/litho/spec/capabilities.json) wins when present.
LITHO_CAPABILITIES: dict[str, Any] = {
    "report_levels": ["aggregate", "detailed"],
    "engine_paths": {
        "epe.gauge": {"detailed": "single_pass"},
        "l2.raster": {"detailed": "unsupported"},
        "pvband.3corner": {"detailed": "rerun_required"},
        "tiled.canvas": {"detailed": "conditional", "precondition": {
            "layout_area_nm2_max": 5e10, "violation_count_max": 50000, "on_exceeded": "degrade_to_aggregate",
            "signaled_via": "degraded_to_aggregate: true on response"}},
    },
    "schema_version": "1.0.0",
    "max_violations_per_response": 10000,
}


def _litho_capabilities(root: Path) -> dict[str, Any]:
    path = root / "tools" / "litho" / "spec" / "capabilities.json"
    if path.is_file():
        return json.loads(path.read_text())
    return LITHO_CAPABILITIES


def specs_from_registry(reg: Any = None) -> dict[str, ToolSpec]:
    """ToolSpecs for every method of the contracts the MCP host serves."""
    from registry import schema_store
    from registry.contracts import default_registry

    reg = reg or default_registry()
    by_id: dict[str, dict[str, Any]] = {}
    for name in schema_store.schema_names():
        doc = schema_store.load_schema(name)
        by_id[doc.get("$id", schema_store.ID_PREFIX + name + ".json")] = doc
    for name, doc in reg.schemas.items():
        by_id[doc.get("$id", schema_store.ID_PREFIX + name + ".json")] = doc

    def lookup(target: str) -> dict[str, Any]:
        return by_id[target]

    def resolved(name: str) -> dict[str, Any]:
        doc = reg.schema(name)
        return inline_refs(doc, doc.get("$id", schema_store.ID_PREFIX + name + ".json"), lookup)

    out: dict[str, ToolSpec] = {}
    for tool_id, served_by in SERVED_BY.items():  # annotations and class: from effects.TOOL_EFFECTS
        contract = reg.contracts.get(tool_id)
        if contract is None:
            continue
        for mname, m in contract.methods.items():
            tags = list(contract.doc["methods"][mname].get("tags") or ())
            mcp_name = next((t.split(":", 1)[1] for t in tags if t.startswith("mcp_name:")), mname)
            aliases = tuple(t.split(":", 1)[1] for t in tags if t.startswith("mcp_alias:")) + ALIASES.get(mname, ())
            if mcp_name != mname:
                aliases += (mname,)
            request = resolved(m.input)
            response = resolved(m.output)
            lr = bool(m.long_running)
            doc = contract.doc["methods"][mname]
            effects = TOOL_EFFECTS[mcp_name]
            derived = hints(effects)
            out[mcp_name] = ToolSpec(
                name=mcp_name, contract_id=contract.contract_id, contract_version=contract.version,
                title=doc.get("summary", mname), description=doc.get("description") or doc.get("summary", mname),
                request=request, response=response, replay=Replay(m.replay), served_by=served_by,
                capability=capability(effects), side_effect=m.side_effect,
                destructive=derived["destructiveHint"], idempotent=derived["idempotentHint"],
                long_running=lr, aliases=aliases,
                capabilities=_litho_capabilities(reg.root) if tool_id == "litho" else None,
                input_schema=_input_schema(request, lr, overwrite="writes_files" in effects),
                output_schema=_output_schema(response, lr), method=mname, effects=effects,
            )
    return out


def specs_from_flat_contract(c: dict[str, Any]) -> dict[str, ToolSpec]:
    """The test-only contract (coordinator/mcp/testing/contract.json): a flat list of methods."""
    out: dict[str, ToolSpec] = {}
    for m in c["methods"]:
        request = m["request"]
        lr = bool(m.get("long_running"))
        response = m.get("response") or {"type": "object"}
        out[m["name"]] = ToolSpec(
            name=m["name"], contract_id=c["contract_id"], contract_version=c["version"],
            title=m.get("title", m["name"]), description=m["description"], request=request, response=response,
            replay=Replay(m.get("replay", "NeverReplay")), served_by=c["served_by"],
            capability=m.get("capability", "read"), side_effect=m.get("side_effect", "none"),
            destructive=bool(m.get("destructive")), idempotent=bool(m.get("idempotent", True)),
            long_running=lr, aliases=tuple(m.get("aliases", ())),
            input_schema=_input_schema(request, lr), output_schema=_output_schema(response, lr), method=m["name"])
    return out


@lru_cache(maxsize=2)
def default_specs(include_test: bool | None = None) -> dict[str, ToolSpec]:
    """Production tools from the registry; plus the test-only tools when asked (or DOME_MCP_TEST_TOOLS=1)."""
    if include_test is None:
        include_test = os.environ.get(TEST_TOOLS_ENV) == "1"
    specs = specs_from_registry()
    if include_test:
        specs.update(specs_from_flat_contract(json.loads(TEST_CONTRACT_PATH.read_text())))
    return specs
