"""Constant-size integration records: long lists held as a hash chain of chunks.

An integration artifact that names every proposal (the stack plan's layers,
the selection entries, the proposals a validation report or a decision
covers, the gate's links and evidence references) would grow with the run.
Before such an artifact goes into the ledger, every top-level list longer
than `CHUNK` entries is cut into chunks of at most `CHUNK` entries. Each
chunk is a blob that names the chunk before it by digest:

    {"artifact_kind": "dome.list_chunk/v1", "index": i, "prev": <digest of chunk i-1 or null>,
     "items": [...]}

and the record keeps only `{"list_chain": {"count": n, "chunks": k, "head": <digest of the last chunk>}}`
in place of the list. A record's size is thus bounded whatever the run's
size, and each chunk is a fixed-size blob.

The artifact's signature is made over the full artifact (lists included),
so a reader walks the chain back from `head` (every blob is checked against
its digest by the blob store), rebuilds the list and checks the signature as
before. A chunk that is missing, altered, out of order, or a chain whose
count differs from the record, raises `ListChainBroken` (a typed error);
pure functions over a `get(digest) -> bytes` and a `put(bytes) -> digest`.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Mapping

from registry.canonical import canonical_json
from registry.errors import DomeError

CHUNK = 64
"""Entries per chunk; lists of at most this many entries stay in the record."""
CHUNK_KIND = "dome.list_chunk/v1"
REF = "list_chain"


class ListChainBroken(DomeError):
    code = "LIST_CHAIN_BROKEN"


def is_ref(value: Any) -> bool:
    return isinstance(value, Mapping) and set(value) == {REF} and isinstance(value[REF], Mapping)


def has_refs(artifact: Mapping[str, Any]) -> bool:
    return any(is_ref(v) for v in artifact.values())


def store_lists(artifact: Mapping[str, Any], put: Callable[[bytes], str], chunk: int | None = None) -> dict[str, Any]:
    """The artifact with each top-level list longer than `chunk` (default `CHUNK`)
    replaced by the reference to its chain of chunks (written with `put`)."""
    chunk = chunk or CHUNK
    out = dict(artifact)
    for key, value in artifact.items():
        if not isinstance(value, list) or len(value) <= chunk:
            continue
        prev: str | None = None
        k = 0
        for k, start in enumerate(range(0, len(value), chunk)):
            prev = put(canonical_json({"artifact_kind": CHUNK_KIND, "index": k, "prev": prev,
                                       "items": value[start:start + chunk]}))
        out[key] = {REF: {"count": len(value), "chunks": k + 1, "head": prev}}
    return out


def read_list(ref: Mapping[str, Any], get: Callable[[str], bytes], field: str = "") -> list[Any]:
    """The list a chain reference names, walked back from its head (raises ListChainBroken)."""
    spec = ref[REF]
    count, chunks, digest = spec.get("count"), spec.get("chunks"), spec.get("head")
    if not isinstance(count, int) or not isinstance(chunks, int) or chunks < 1 or not isinstance(digest, str):
        raise ListChainBroken(f"list {field!r}: malformed chain reference", details={"field": field})
    parts: list[list[Any]] = []
    for index in range(chunks - 1, -1, -1):
        if not isinstance(digest, str):
            raise ListChainBroken(f"list {field!r}: the chain ends at chunk {index + 1}, before its first chunk",
                                  details={"field": field, "index": index})
        try:
            doc = json.loads(get(digest))
        except DomeError as exc:  # the blob store's BlobNotFound / BlobCorrupt, a malformed digest
            raise ListChainBroken(f"list {field!r}: chunk {index} ({digest}): {exc.code}",
                                  details={"field": field, "index": index, "digest": digest}) from None
        except (OSError, ValueError) as exc:  # unreadable, or not JSON
            raise ListChainBroken(f"list {field!r}: chunk {index} ({digest}): {type(exc).__name__}",
                                  details={"field": field, "index": index, "digest": digest}) from None
        if not isinstance(doc, dict) or doc.get("artifact_kind") != CHUNK_KIND or doc.get("index") != index \
                or not isinstance(doc.get("items"), list):
            raise ListChainBroken(f"list {field!r}: chunk {index} ({digest}) is not chunk {index} of a list",
                                  details={"field": field, "index": index, "digest": digest})
        parts.append(doc["items"])
        digest = doc.get("prev")
    if digest is not None:
        raise ListChainBroken(f"list {field!r}: the first chunk names a chunk before it",
                              details={"field": field})
    items = [x for part in reversed(parts) for x in part]
    if len(items) != count:
        raise ListChainBroken(f"list {field!r}: the chain holds {len(items)} entries, the record says {count}",
                              details={"field": field, "count": count, "found": len(items)})
    return items


def load_lists(artifact: Mapping[str, Any], get: Callable[[str], bytes]) -> dict[str, Any]:
    """The artifact with every chain reference replaced by its list (raises ListChainBroken)."""
    return {k: (read_list(v, get, k) if is_ref(v) else v) for k, v in artifact.items()}
