"""The fixture the official MCP conformance suite calls (only with DOME_MCP_CONFORMANCE=1).

The suite (`@modelcontextprotocol/conformance`) checks a server's protocol
machinery through tools and resources of fixed names (test_simple_text,
test://static-text, ...). These are served by dome's real dispatcher, the
same path as every production tool (validation, porcelain, structured
result, extra content, progress, client log, isError), so a pass says the
front door's protocol handling is right. They never appear without the
switch. docs/mcp.md lists the scenarios and which do not apply to dome.
"""
from __future__ import annotations

import base64
import json
import os
from typing import TYPE_CHECKING, Any

from registry.errors import DomeError

if TYPE_CHECKING:
    from .context import CallContext

ENV = "DOME_MCP_CONFORMANCE"
# a 1x1 PNG and a 44-byte silent WAV: the smallest valid payloads of each kind
PNG_1PX = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
WAV_SILENT = base64.b64encode(b"RIFF$\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x40\x1f\x00\x00"
                              b"\x80\x3e\x00\x00\x02\x00\x10\x00data\x00\x00\x00\x00").decode()
TEXT_URI, BINARY_URI = "test://static-text", "test://static-binary"
TEMPLATE = "test://template/{id}/data"

CONTRACT: dict[str, Any] = {
    "contract_id": "dome.mcp_conformance", "version": "1.0.0", "served_by": "host",
    "methods": [{"name": n, "description": d, "request": {"type": "object", "properties": {}}}
                for n, d in (("test_simple_text", "conformance fixture: text content"),
                             ("test_image_content", "conformance fixture: image content"),
                             ("test_audio_content", "conformance fixture: audio content"),
                             ("test_embedded_resource", "conformance fixture: an embedded resource"),
                             ("test_multiple_content_types", "conformance fixture: text, image and resource"),
                             ("test_tool_with_progress", "conformance fixture: three progress notifications"),
                             ("test_error_handling", "conformance fixture: an isError result"))],
}

_RESOURCE = {"type": "resource", "resource": {"uri": TEXT_URI, "mimeType": "text/plain",
                                             "text": "This is the content of the static text resource."}}
_IMAGE = {"type": "image", "data": PNG_1PX, "mimeType": "image/png"}


async def _simple_text(args: dict[str, Any], ctx: "CallContext") -> dict[str, Any]:
    return {"text": "This is a simple text response for testing."}


async def _image(args: dict[str, Any], ctx: "CallContext") -> dict[str, Any]:
    ctx.content.append(_IMAGE)
    return {"image": "image/png"}


async def _audio(args: dict[str, Any], ctx: "CallContext") -> dict[str, Any]:
    ctx.content.append({"type": "audio", "data": WAV_SILENT, "mimeType": "audio/wav"})
    return {"audio": "audio/wav"}


async def _embedded(args: dict[str, Any], ctx: "CallContext") -> dict[str, Any]:
    ctx.content.append(_RESOURCE)
    return {"resource": TEXT_URI}


async def _mixed(args: dict[str, Any], ctx: "CallContext") -> dict[str, Any]:
    ctx.content += [_IMAGE, _RESOURCE]
    return {"text": "text, image and resource"}


async def _progress(args: dict[str, Any], ctx: "CallContext") -> dict[str, Any]:
    for value in (0.0, 50.0, 100.0):
        if ctx.progress is not None:
            await ctx.progress(value, 100.0, f"{value:.0f}%")
    return {"progress_notifications": 3}


async def _error(args: dict[str, Any], ctx: "CallContext") -> dict[str, Any]:
    raise DomeError("this tool always fails (conformance fixture)", code="FIXTURE_ERROR")


HANDLERS = {"test_simple_text": _simple_text, "test_image_content": _image, "test_audio_content": _audio,
            "test_embedded_resource": _embedded, "test_multiple_content_types": _mixed,
            "test_tool_with_progress": _progress, "test_error_handling": _error}


def enabled() -> bool:
    return os.environ.get(ENV) == "1"


def resources() -> list[dict[str, Any]]:
    return [{"uri": TEXT_URI, "name": "static-text", "mimeType": "text/plain"},
            {"uri": BINARY_URI, "name": "static-binary", "mimeType": "image/png"}]


def templates() -> list[dict[str, Any]]:
    return [{"uriTemplate": TEMPLATE, "name": "template", "mimeType": "application/json"}]


def read(uri: str) -> dict[str, Any] | None:
    """The fixture resource a URI names, or None."""
    if uri == TEXT_URI:
        return dict(_RESOURCE["resource"])
    if uri == BINARY_URI:
        return {"uri": uri, "mimeType": "image/png", "blob": PNG_1PX}
    prefix, suffix = "test://template/", "/data"
    if uri.startswith(prefix) and uri.endswith(suffix) and len(uri) > len(prefix) + len(suffix):
        ident = uri[len(prefix):-len(suffix)]
        return {"uri": uri, "mimeType": "application/json", "text": json.dumps({"id": ident, "templated": True})}
    return None
