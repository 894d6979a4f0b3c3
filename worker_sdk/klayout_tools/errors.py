"""Typed errors of the KLayout observer tools, one class per contract code.

Each is a registry.errors.DomeError whose `code` is exactly one of the codes
of specs/klayout-observer-mcp-contract.md; `to_object()` is the ErrorObject.
"""
from __future__ import annotations

from registry.errors import DomeError

CONTRACT_CODES = (
    "FILE_NOT_FOUND", "UNSUPPORTED_FORMAT", "TOP_CELL_NOT_FOUND", "SESSION_NOT_FOUND",
    "SESSION_EXPIRED", "INVALID_BOX", "INVALID_LAYER", "INVALID_TARGET", "QUERY_TOO_LARGE",
    "TOOL_LIMIT_EXCEEDED", "RENDER_FAILED", "DRC_RUN_FAILED", "INTERNAL_ERROR",
)


class KlayoutToolError(DomeError):
    code = "INTERNAL_ERROR"


class FileNotFound(KlayoutToolError):
    code = "FILE_NOT_FOUND"


class UnsupportedFormat(KlayoutToolError):
    code = "UNSUPPORTED_FORMAT"


class TopCellNotFound(KlayoutToolError):
    code = "TOP_CELL_NOT_FOUND"


class SessionNotFound(KlayoutToolError):
    code = "SESSION_NOT_FOUND"


class SessionExpired(KlayoutToolError):
    code = "SESSION_EXPIRED"


class InvalidBox(KlayoutToolError):
    code = "INVALID_BOX"


class InvalidLayer(KlayoutToolError):
    code = "INVALID_LAYER"


class InvalidTarget(KlayoutToolError):
    code = "INVALID_TARGET"


class QueryTooLarge(KlayoutToolError):
    code = "QUERY_TOO_LARGE"


class ToolLimitExceeded(KlayoutToolError):
    code = "TOOL_LIMIT_EXCEEDED"


class RenderFailed(KlayoutToolError):
    code = "RENDER_FAILED"
    retry = "light"


class DrcRunFailed(KlayoutToolError):
    code = "DRC_RUN_FAILED"


class InternalError(KlayoutToolError):
    code = "INTERNAL_ERROR"
    retry = "light"
