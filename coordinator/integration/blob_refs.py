"""Every blob a record names, and the re-hash that proves each one intact (pure).

A signed record attests bytes it does not carry: a validation report names its
logs (`artifact_digests`), a verified proposal its canonical diff (`diff_blob`),
a submitted patch its uploaded diff (`diff_ref`), an uploaded artifact its
bytes (`artifact.put`'s `digest`), a model call its request and reply, a large
record its externalized body (`artifact_ref`), a long list its chunk chain, and
`run.finished` its proposal lists. The in-toto statements exported beside a
decision name the same logs as subjects. `dome verify` and `dome
ledger verify` read every one of them back through `get` (the blob store
re-hashes on every read) and name each blob that is missing or changed together
with the record that names it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from ledger.errors import BlobCorrupt, BlobNotFound

BLOB_KEYS = frozenset({"artifact_digests", "diff_blob", "diff_ref", "artifact_ref", "proposal_lists_ref"})
"""Keys whose value (a digest, or a list of digests) names a blob, at any depth of a payload."""
TOPIC_KEYS: Mapping[str, frozenset[str]] = {
    "artifact.put": frozenset({"digest"}),
    "model.call": frozenset({"request_digest", "response_digest"}),
}
"""Keys that name a blob only in the top level of one topic's payload."""
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class BlobRef:
    digest: str
    named_by: str  # the record and field that name it: "#12 integration.validation_report artifact_digests"
    sequence: int | None = None  # the naming record's sequence (None: an in-toto subject)


@dataclass(frozen=True)
class BlobProblem:
    ref: BlobRef
    status: str  # "missing" | "changed"
    detail: str

    def describe(self) -> str:
        return f"blob {self.ref.digest} named by {self.ref.named_by}: {self.status} ({self.detail})"


def _digests(value: Any) -> list[str]:
    vals = value if isinstance(value, list) else [value]
    return [v for v in vals if isinstance(v, str) and _DIGEST.match(v)]


def _walk(value: Any, where: str, out: list[BlobRef]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            if k in BLOB_KEYS:
                out.extend(BlobRef(d, f"{where} {k}") for d in _digests(v))
            elif k == "list_chain" and isinstance(v, Mapping):
                out.extend(BlobRef(d, f"{where} list_chain") for d in _digests(v.get("head")))
            else:
                _walk(v, where, out)
    elif isinstance(value, list):
        for v in value:
            _walk(v, where, out)


def record_blobs(sequence: int, topic: str, payload: Mapping[str, Any]) -> list[BlobRef]:
    """The blobs one record's payload names."""
    where = f"#{sequence} {topic}"
    out: list[BlobRef] = []
    for k in sorted(TOPIC_KEYS.get(topic, ())):
        out.extend(BlobRef(d, f"{where} {k}") for d in _digests(payload.get(k)))
    _walk(payload, where, out)
    return [BlobRef(r.digest, r.named_by, sequence) for r in out]


def events_blobs(events: Iterable[Any]) -> list[BlobRef]:
    """The blobs a run's events name (EventRecords, or Records with `artifact`)."""
    out: list[BlobRef] = []
    for e in events:
        payload = getattr(e, "payload", None)
        if payload is None:
            payload = getattr(e, "artifact", {})
        out.extend(record_blobs(int(e.sequence), str(e.topic), payload))
    return out


def statement_blobs(statements: Sequence[Mapping[str, Any]]) -> list[BlobRef]:
    """The in-toto subjects that are blobs: logs and artifacts (`artifact:`). A `diff:` subject
    names a canonical diff by digest; a whole proposal's is the blob its verified record names
    (`diff_blob`), a split part's is derived from it and re-derived by `dome verify`'s replay."""
    out: list[BlobRef] = []
    for i, st in enumerate(statements, start=1):
        for s in st.get("subject", []) or []:
            name, sha = str(s.get("name", "")), (s.get("digest") or {}).get("sha256")
            if sha and name.split(":", 1)[0] == "artifact":
                out.append(BlobRef(f"sha256:{sha}", f"in-toto statement {i} subject {name}"))
    return out


def check_blobs(refs: Iterable[BlobRef], get: Callable[[str], bytes]) -> list[BlobProblem]:
    """Read each named blob once (`get` re-hashes it and raises on a missing or
    changed one); one problem per bad blob, naming the first record that names it."""
    seen: set[str] = set()
    out: list[BlobProblem] = []
    for ref in refs:
        if ref.digest in seen:
            continue
        seen.add(ref.digest)
        try:
            get(ref.digest)
        except BlobNotFound:
            out.append(BlobProblem(ref, "missing", "not in the blob store"))
        except BlobCorrupt as exc:
            out.append(BlobProblem(ref, "changed", f"its bytes hash to {exc.details.get('actual')}"))
    return out
