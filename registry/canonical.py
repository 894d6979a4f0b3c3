"""Canonical JSON (RFC 8785, JCS) and content digests.

Every digested or signed record names the canonicalization it used in a
`canonicalization` field; the only one dome writes is CANONICALIZATION.
Digests are written as "sha256:<hex>".
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

import rfc8785

from .errors import CanonicalizationError

CANONICALIZATION = "rfc8785-jcs"
DIGEST_ALGORITHM = "sha256"


_SAFE_INT = 2**53 - 1
_FAST_DUMPS = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode


def _fast_ok(obj: Any) -> bool:
    """True when json.dumps(sort_keys, compact, ensure_ascii=False) is exactly
    RFC 8785 for `obj`: only dicts with ASCII str keys (code-point order equals
    UTF-16 order), lists, str, bool, None and ints within +/-(2**53-1). Floats,
    tuples and anything else take the reference path. Lone surrogates are
    caught by the strict UTF-8 encode in canonical_json."""
    t = type(obj)
    if t is str or obj is None or t is bool:
        return True
    if t is int:
        return -_SAFE_INT <= obj <= _SAFE_INT
    if t is dict:
        for k, v in obj.items():
            if type(k) is not str or not k.isascii():
                return False
            tv = type(v)
            if tv is str or v is None or tv is bool:
                continue
            if not _fast_ok(v):
                return False
        return True
    if t is list:
        for v in obj:
            tv = type(v)
            if tv is str or v is None or tv is bool:
                continue
            if not _fast_ok(v):
                return False
        return True
    return False


def canonical_json(obj: Any) -> bytes:
    """RFC 8785 bytes of `obj`. Non-finite floats, out-of-range integers and
    non-JSON types raise CanonicalizationError.

    Hot path: values made only of objects with ASCII keys, arrays, strings,
    booleans, null and safe integers serialize through the C json encoder,
    whose output is byte-identical to RFC 8785 for exactly those values
    (tests/registry/test_canonical_fastpath.py checks this with hypothesis);
    everything else goes through the reference implementation."""
    try:
        if _fast_ok(obj):
            return _FAST_DUMPS(obj).encode("utf-8")
    except (UnicodeEncodeError, RecursionError, ValueError):
        pass  # lone surrogate or pathological depth: let the reference decide
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
