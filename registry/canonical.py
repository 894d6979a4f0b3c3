"""Canonical JSON (RFC 8785, JCS) and content digests.

Every digested or signed record names the canonicalization it used in a
`canonicalization` field; the only one dome writes is CANONICALIZATION.
Digests are written as "sha256:<hex>".
"""
from __future__ import annotations

import hashlib
from typing import Any

import rfc8785

from .errors import CanonicalizationError

CANONICALIZATION = "rfc8785-jcs"
DIGEST_ALGORITHM = "sha256"


def canonical_json(obj: Any) -> bytes:
    """RFC 8785 bytes of `obj`. Non-finite floats, out-of-range integers and
    non-JSON types raise CanonicalizationError."""
    try:
        return rfc8785.dumps(obj)
    except RecursionError as exc:
        raise CanonicalizationError(
            "value is nested too deeply to canonicalize", details={"type": "RecursionError"},
        ) from exc
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise CanonicalizationError(
            f"value cannot be canonicalized: {exc}",
            details={"type": type(exc).__name__},
            hints=["use strings for integers beyond +/-2**53 and avoid NaN/Infinity"],
        ) from exc


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest_bytes(data: bytes) -> str:
    """The dome digest string of raw bytes."""
    return f"{DIGEST_ALGORITHM}:{sha256_hex(data)}"


def digest_json(obj: Any) -> str:
    """The dome digest string of a JSON value's canonical form."""
    return digest_bytes(canonical_json(obj))


def parse_digest(value: str) -> tuple[str, str]:
    """Split "sha256:<hex>" into (algorithm, hex); raise on anything else."""
    algo, sep, hexpart = value.partition(":")
    if sep != ":" or algo != DIGEST_ALGORITHM or len(hexpart) != 64 or any(
        c not in "0123456789abcdef" for c in hexpart
    ):
        raise CanonicalizationError(f"not a sha256 digest: {value!r}")
    return algo, hexpart
