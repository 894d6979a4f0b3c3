"""Canonical JSON of values that share parts, each part serialized once.

One gateway request holds the same objects several times: a PatchProposal is the
`proposal` of submit_patch's arguments, again inside the complete_task that carries
that call, and again in the `patch.submitted` record's payload. Each of those needs
its canonical bytes (the call proof covers them; the record stores them). Inside
`shared()` (one request, one thread), `canonical(value)` remembers the bytes of the
containers it serializes, by identity, and a later value that holds one of them
reuses its bytes instead of encoding it again.

The result is always `registry.canonical.canonical_json(value)`, byte for byte:
RFC 8785 is compositional (an object is its members sorted by key, each key and
value in its own canonical form; an array its items'), so an object is assembled
from the canonical bytes of its members, in key order. Only objects whose keys are
all ASCII are assembled (their code point order is RFC 8785's UTF-16 order); any
other goes to `canonical_json` whole. The values must not change while the scope is
open (a request's arguments and records are read, never written).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator

from registry.canonical import canonical_json

DEPTH = 3  # how deep a value is searched for parts already serialized
LARGE = 8  # an object with this many members is remembered on its own, for a later value holding it
_local = threading.local()
_Memo = dict  # id(container) -> (container, its canonical bytes); the reference keeps the id unique


@contextmanager
def shared() -> Iterator[None]:
    """A scope (this thread) in which `canonical` remembers and reuses serialized parts."""
    if getattr(_local, "memo", None) is not None:
        yield  # nested: the outer scope's memo serves
        return
    _local.memo = {}
    try:
        yield
    finally:
        _local.memo = None


def canonical(value: Any) -> bytes:
    """canonical_json(value), reusing the bytes of parts serialized earlier in this scope."""
    memo = getattr(_local, "memo", None)
    if memo is None:
        return canonical_json(value)
    return _compose(value, memo, DEPTH)


def _known(value: Any, memo: _Memo) -> bytes | None:
    hit = memo.get(id(value))
    return hit[1] if hit is not None and hit[0] is value else None


def _apart(value: Any, memo: _Memo, depth: int) -> bool:
    """Whether `value` is serialized on its own: a container known already, large enough to
    be remembered, or holding such a part within `depth`."""
    t = type(value)
    if t is not dict and t is not list:
        return False
    if _known(value, memo) is not None or (t is dict and len(value) >= LARGE):
        return True
    if depth <= 0:
        return False
    return any(_apart(v, memo, depth - 1) for v in (value.values() if t is dict else value))


def _compose(value: Any, memo: _Memo, depth: int) -> bytes:
    hit = _known(value, memo)
    if hit is not None:
        return hit
    t = type(value)
    data: bytes | None = None
    if depth > 0 and t is dict and all(type(k) is str and k.isascii() for k in value):
        apart = {k for k, v in value.items() if _apart(v, memo, depth - 1)}
        if apart:
            data = _object(value, apart, memo, depth)
    elif depth > 0 and t is list and any(_apart(v, memo, depth - 1) for v in value):
        data = b"[" + b",".join(_compose(v, memo, depth - 1) for v in value) + b"]"
    if data is None:
        data = canonical_json(value)
    if t is dict or t is list:
        memo[id(value)] = (value, data)
    return data


def _object(value: dict[str, Any], apart: set[str], memo: _Memo, depth: int) -> bytes:
    """The object's bytes: members in key order, runs of plain members encoded together."""
    out: list[bytes] = []
    run: dict[str, Any] = {}
    for k in sorted(value):
        if k in apart:
            if run:
                out.append(canonical_json(run)[1:-1])
                run = {}
            out.append(canonical_json(k) + b":" + _compose(value[k], memo, depth - 1))
        else:
            run[k] = value[k]
    if run:
        out.append(canonical_json(run)[1:-1])
    return b"{" + b",".join(out) + b"}"
