"""Model-facing text: porcelain by default, JSON on request; bounded results.

Porcelain is line-oriented, deterministic, bounded and summary-first:

    ok evaluate schema_version=1.0.0 keys=4
    metrics.epe_violations: 12
    violations: 37 items
    violations[0]: {"rule_id":"EPE",...}
    ...
    truncated: 12 more lines (render=json for everything)

Structured results larger than MAX_STRUCTURED_BYTES are cut down (largest
arrays first) with explicit truncation metadata and the full JSON written to
an artifact file whose path is returned.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping

from registry.canonical import digest_bytes

MAX_LINES = 60
MAX_LINE_CHARS = 240
MAX_LIST_ITEMS = 8
MAX_STRUCTURED_BYTES = 256 * 1024
PROVENANCE_KEYS = ("inputs_hash", "outputs_hash", "seed", "run_id")


_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str).encode


def _compact(value: Any) -> str:
    return _COMPACT(value)


def _clip(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 3] + "..."


_STR = json.encoder.encode_basestring  # what _compact writes for a str (ensure_ascii=False), in C


def _scalar(value: Any) -> str:
    """_compact(value) for the common leaves, without an encoder run per leaf."""
    t = type(value)
    if t is str:
        return _STR(value)
    if t is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    if t is int:
        return int.__repr__(value)
    if t is float and math.isfinite(value):
        return float.__repr__(value)
    return _compact(value)


_LEAVES = frozenset({str, int, float, bool, type(None)})


def _flatten(prefix: str, value: Any, lines: list[str]) -> None:
    t = type(value)
    if t in _LEAVES or (t is not dict and t is not list and not isinstance(value, (Mapping, list))):
        lines.append(f"{prefix}: {_scalar(value)}")
    elif t is dict or isinstance(value, Mapping):
        if not value:
            lines.append(f"{prefix}: {{}}")
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, lines)
    elif isinstance(value, list):
        lines.append(f"{prefix}: {len(value)} items")
        for i, item in enumerate(value[:MAX_LIST_ITEMS]):
            lines.append(f"{prefix}[{i}]: {_compact(item)}")
        if len(value) > MAX_LIST_ITEMS:
            lines.append(f"{prefix}: {len(value) - MAX_LIST_ITEMS} more items not shown "
                         "(all are in structuredContent; render=json prints them)")


def porcelain(tool: str, result: Mapping[str, Any], *, notes: list[str] | tuple[str, ...] = ()) -> str:
    head = [f"ok {tool}"]
    for key in ("status", "job_id", "run_id", "session_id"):
        if key in result and isinstance(result[key], (str, int, float)):
            head.append(f"{key}={result[key]}")
    lines = [" ".join(head)]
    lines += [f"note: {n}" for n in notes]
    body = {k: v for k, v in result.items() if k not in ("provenance", "schema_version")}
    _flatten("", body, lines)
    prov = result.get("provenance")
    if isinstance(prov, Mapping):
        lines.append("provenance: " + " ".join(f"{k}={prov[k]}" for k in PROVENANCE_KEYS if prov.get(k) is not None))
    return _bound(lines)


def porcelain_error(error: Mapping[str, Any], *, notes: list[str] | tuple[str, ...] = ()) -> str:
    lines = [f"error {error.get('code')}: {error.get('message')}"]
    if error.get("category"):
        lines.append(f"category: {error['category']}")
    lines.append(f"retry: {error.get('retry', 'none')}")
    lines += [f"hint: {h}" for h in error.get("hints", ())]
    lines += [f"note: {n}" for n in notes]
    details = error.get("details") or {}
    for k in ("field", "unknown_fields", "tool", "job_id", "session_id", "generation", "replay"):
        if k in details:
            lines.append(f"{k}: {_compact(details[k])}")
    return _bound(lines)


def _bound(lines: list[str]) -> str:
    lines = [_clip(x) for x in lines]
    if len(lines) > MAX_LINES:
        extra = len(lines) - (MAX_LINES - 1)
        lines = lines[: MAX_LINES - 1] + [f"truncated: {extra} more lines (structuredContent has everything; "
                                          "render=json prints it)"]
    return "\n".join(lines)


_JSON_TEXT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def as_json_text(result: Mapping[str, Any]) -> str:
    return _JSON_TEXT(result)


# Contracts whose engine has one serialization of its own: render=json gives exactly those bytes.
# The litho engine prints sorted keys, compact, ASCII (worker_sdk.litho.api.dumps): the CLI's stdout.
ENGINE_JSON = {"dome.litho": {"sort_keys": True, "ensure_ascii": True}}


def json_text(contract_id: str, result: Mapping[str, Any]) -> str:
    """render=json text: the engine's own serialization where it has one, else the result's key order."""
    style = ENGINE_JSON.get(contract_id)
    if style is None:
        return as_json_text(result)
    return json.dumps(result, separators=(",", ":"), **style)


def bound_structured(result: dict[str, Any], artifact_dir: Path | None, *,
                     text: str | None = None) -> dict[str, Any]:
    """Cut an oversized result down to MAX_STRUCTURED_BYTES, keeping the whole in an artifact.

    `text`: as_json_text(result), when the caller has it already."""
    raw = (as_json_text(result) if text is None else text).encode()
    if len(raw) <= MAX_STRUCTURED_BYTES:
        return result
    artifact = None
    if artifact_dir is not None:
        artifact_dir.mkdir(parents=True, exist_ok=True)
        digest = digest_bytes(raw)
        artifact = artifact_dir / f"{digest.split(':')[1]}.json"
        if not artifact.exists():
            artifact.write_bytes(raw)
    out = dict(result)
    omitted: dict[str, int] = {}
    arrays = sorted((k for k, v in out.items() if isinstance(v, list)), key=lambda k: -len(as_json_text(out[k])))
    for key in arrays:
        items = out[key]
        keep = len(items)
        while keep > 0 and len(as_json_text(out).encode()) > MAX_STRUCTURED_BYTES:
            keep = keep // 2
            out[key] = items[:keep]
        if keep < len(items):
            omitted[key] = len(items) - keep
        if len(as_json_text(out).encode()) <= MAX_STRUCTURED_BYTES:
            break
    out["truncation"] = {"truncated": True, "omitted_items": omitted, "full_bytes": len(raw),
                         "artifact": {"kind": "result_json", "path": str(artifact) if artifact else None,
                                      "media_type": "application/json"}}
    return out
