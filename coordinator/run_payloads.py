"""Lists that grow with the run live in the blob store, not in event payloads.

`run.finished` used to carry every accepted proposal id (`proposals`) and every
proposal the integration head includes (`included_proposals`): with thousands
of proposals the event passed the ledger's payload limit after the target ref
had already moved. `offload_finish_lists` moves both lists into one blob, the
canonical JSON `{"included_proposals": [...], "proposals": [...]}`, and leaves
in the payload its digest and the two counts, so the payload's size does not
depend on N. `finish_lists` reads them back (checking the digest: the blob
store refuses bytes that do not hash to their name); `dome verify` checks that
the blob exists and agrees with the promotion decision.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from registry.canonical import canonical_json

LISTS_REF = "proposal_lists_ref"
LISTS = ("proposals", "included_proposals")


def offload_finish_lists(blobs: Any, payload: Mapping[str, Any]) -> dict[str, Any]:
    """The run.finished payload with its proposal lists replaced by a blob digest and counts."""
    out = {k: v for k, v in payload.items() if k not in LISTS}
    lists = {k: list(payload.get(k) or []) for k in LISTS}
    out[LISTS_REF] = blobs.put(canonical_json(lists))
    out["proposal_count"] = len(lists["proposals"])
    out["included_count"] = len(lists["included_proposals"])
    return out


def finish_lists(blobs: Any, payload: Mapping[str, Any]) -> dict[str, list[str]]:
    """The proposal lists of a run.finished payload: from its blob, or inline (older runs).
    Raises the blob store's BlobNotFound / BlobCorrupt, or ValueError for a blob that is
    not the lists' canonical JSON or disagrees with the counts beside its digest."""
    ref = payload.get(LISTS_REF)
    if ref is None:
        return {k: list(payload.get(k) or []) for k in LISTS}
    data = blobs.get(str(ref))
    lists = json.loads(data)
    if not isinstance(lists, dict) or set(lists) != set(LISTS) or canonical_json(lists) != data \
            or not all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in lists.values()):
        raise ValueError("the proposal lists blob is not the canonical {included_proposals, proposals} object")
    if len(lists["proposals"]) != payload.get("proposal_count") \
            or len(lists["included_proposals"]) != payload.get("included_count"):
        raise ValueError("the proposal lists blob disagrees with the counts run.finished records")
    return lists
