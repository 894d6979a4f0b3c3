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


_MAX_SAFE = 2**53 - 1
_FIRST_SURROGATE = "\ud800"
_FAST_DUMPS = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode


class _Slow(Exception):
    """The value needs the reference serializer."""


def _fast_form(x: Any) -> Any:
    """`x` in a form whose stdlib compact sorted output is already RFC 8785, or _Slow.

    The stdlib encoder agrees with RFC 8785 for: floats where Python's repr
    equals ECMAScript's Number::toString (non-integral, 1e-4 <= |x| < 1e16),
    integers in the safe range, str keys with no character at or above
    U+D800 (below it, code point order equals UTF-16 code unit order).
    Integral floats in the safe range (2.0, -0.0; geometry results are full
    of them) are replaced by the integers ECMAScript prints for them, so
    they stay on this path. Containers are copied only when something in
    them changed."""
    t = type(x)
    if t is str or x is None or t is bool:
        return x
    if t is int:
        if -_MAX_SAFE <= x <= _MAX_SAFE:
            return x
        raise _Slow
    if t is float:
        if 1e-4 <= abs(x) < 1e16 and not x.is_integer():
            return x
        if x.is_integer() and -_MAX_SAFE <= x <= _MAX_SAFE:
            return int(x)
        raise _Slow
    if t is dict:
        out = None
        for k, v in x.items():
            if type(k) is not str or (not k.isascii() and max(k) >= _FIRST_SURROGATE):
                raise _Slow
            w = _fast_form(v)
            if w is not v:
                if out is None:
                    out = dict(x)
                out[k] = w
        return x if out is None else out
    if t is list or t is tuple:
        items = [_fast_form(v) for v in x]
        return x if t is list and all(a is b for a, b in zip(items, x)) else items
    raise _Slow


def stdlib_form_is_canonical(obj: Any) -> bool:
    """True when the stdlib encoder's compact sorted output for `obj` (as
    `canonical_json` configures it) is already its RFC 8785 bytes, with nothing
    to convert first: a reader holding a value parsed from canonical bytes can
    then reuse those bytes instead of encoding the value again (lone
    surrogates aside, which RFC 8785 escapes and the stdlib does not)."""
    try:
        return _fast_form(obj) is obj
    except _Slow:
        return False


def canonical_json(obj: Any) -> bytes:
    """RFC 8785 bytes of `obj`. Non-finite floats, out-of-range integers and
    non-JSON types raise CanonicalizationError.

    Hot path: values _fast_form accepts serialize through the C json encoder,
    whose output is byte-identical to RFC 8785 for exactly those values
    (tests/registry/test_canonical_fastpath.py and test_canonical.py check
    this with hypothesis against the library and a reference serializer);
    everything else goes through the reference implementation."""
    try:
        return _FAST_DUMPS(_fast_form(obj)).encode("utf-8")
    except (_Slow, UnicodeEncodeError, RecursionError, ValueError):
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
