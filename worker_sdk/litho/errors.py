"""Typed errors of the litho engine (all are registry.errors.DomeError)."""
from __future__ import annotations

from registry.errors import DomeError


class LithoError(DomeError):
    code = "LITHO_ERROR"


class KernelFormatError(LithoError):
    code = "LITHO_KERNEL_FORMAT"


class LayoutFormatError(LithoError):
    code = "LITHO_LAYOUT_FORMAT"


class MaskFormatError(LithoError):
    code = "LITHO_MASK_FORMAT"


class FFTSelfTestError(LithoError):
    code = "LITHO_FFT_SELFTEST"
    retry = "none"


class BadRequest(LithoError):
    code = "LITHO_BAD_REQUEST"


class LayoutNotPinned(LithoError):
    code = "LAYOUT_NOT_PINNED"  # RFC 0006 §5 layout_not_pinned


class CacheEvicted(LithoError):
    code = "CACHE_EVICTED"  # RFC 0006 §5 cache_evicted


class ViolationNotFound(LithoError):
    code = "VIOLATION_NOT_FOUND"


class ReportLevelUnsupported(LithoError):
    code = "REPORT_LEVEL_UNSUPPORTED"


class TileResumeRefused(LithoError):
    """A finished tile offered to a retried attempt is bound to another plan, task or tile, or its
    bytes do not match its record: it is not reused."""
    code = "LITHO_TILE_RESUME_REFUSED"
    retry = "none"
