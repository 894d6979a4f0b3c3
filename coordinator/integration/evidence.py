"""Evidence: signing artifacts, and evaluating the evidence chain (pure).

Every integration artifact is signed on its own (independently of the
ledger record that carries it), so the chain can be checked from the
artifacts alone and exported as DSSE envelopes:

    body      = the artifact without payload_digest, canonicalization, kid, signature
    payload_digest = sha256 of RFC 8785 canonical JSON of body
    signature = Ed25519 over DSSE PAE(PAYLOAD_TYPE, canonical body)

The gate that reads these records lives in `coordinator.integration.gate`.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from registry.canonical import CANONICALIZATION, canonical_json, digest_bytes, digest_json
from registry.errors import SignatureError
from registry.signing import Keyring, SigningKey, b64d, b64e

from .policy import IntegrationPolicy

PAYLOAD_TYPE = "application/vnd.dome.artifact+json"
SIG_FIELDS = ("payload_digest", "canonicalization", "kid", "signature")

T_POLICY = "integration.policy"
T_PROPOSAL = "integration.proposal_verified"
T_REJECTED = "integration.proposal_rejected"
T_PLAN = "integration.stack_plan"
T_SELECTION = "integration.selection_decision"
T_APPLY = "integration.apply_result"
T_CHECKPOINT = "integration.checkpoint"
T_VALIDATION = "integration.validation_report"
T_REQUIREMENTS = "integration.requirements"
T_GATE = "gate.computed"
T_CONSENT_REQ = "promotion.consent_requested"
T_CONSENT = "promotion.consent_granted"
T_PROMOTION = "promotion.computed"
# how a promotion decision names a target that could not take the head (`dome verify` reads them back)
TARGET_MOVED = "(moved since the base; not an ancestor of the head)"
TARGET_CHECKED_OUT = "(checked out in the worktree "


def body_of(artifact: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in artifact.items() if k not in SIG_FIELDS}


def sign_artifact(artifact: Mapping[str, Any], key: SigningKey) -> dict[str, Any]:
    return sign_artifact_canonical(artifact, key)[0]


def sign_artifact_canonical(artifact: Mapping[str, Any], key: SigningKey) -> tuple[dict[str, Any], bytes]:
    """(signed artifact, its canonical bytes) from one encoding: the body is encoded with
    the four signature fields holding one-off placeholder strings; the signed body's
    bytes are those bytes with the four members cut out, and the artifact's bytes are
    them with the real values put in. Each placeholder member must occur exactly once in
    the encoding (so the one found is the top-level member); else the general way."""
    body = body_of(artifact)
    marks = {f: "placeholder-" + secrets.token_hex(12) for f in SIG_FIELDS}
    try:
        template = canonical_json({**body, **marks})
        members = [(f, b'"' + f.encode() + b'":' + canonical_json(marks[f])) for f in SIG_FIELDS]
        raw = template
        for _, m in members:
            raw = _cut_member(raw, m)
    except _Placeholder:
        raw = template = b""
    if not raw:
        raw = canonical_json(body)
    digest, signature = digest_bytes(raw), b64e(key.sign_pae(PAYLOAD_TYPE, raw))
    _SIGNED_HERE.note(key.public.raw, digest, signature)
    signed = {**body, "payload_digest": digest, "canonicalization": CANONICALIZATION,
              "kid": key.kid, "signature": signature}
    if not template:
        return signed, canonical_json(signed)
    data = template
    for f, m in members:
        data = data.replace(m, b'"' + f.encode() + b'":' + canonical_json(signed[f]), 1)
    return signed, data


class _Placeholder(Exception):
    """A placeholder member is not found exactly once: encode the general way."""


def _cut_member(data: bytes, member: bytes) -> bytes:
    """`data` (a canonical object) without its top-level `member` and the comma beside it."""
    i = data.find(member)
    if i < 1 or data.count(member) != 1:
        raise _Placeholder
    j = i + len(member)
    if data[i - 1:i] == b",":
        return data[:i - 1] + data[j:]
    if data[j:j + 1] == b",":
        return data[:i] + data[j + 1:]
    return data[:i] + data[j:]


def verify_artifact(artifact: Mapping[str, Any], keyring: Keyring) -> str:
    """Check digest and signature; return the kid. Raises SignatureError."""
    for f in ("payload_digest", "kid", "signature"):
        if not isinstance(artifact.get(f), str):
            raise SignatureError(f"artifact has no {f}", code="EVIDENCE_UNSIGNED",
                                 details={"field": f})
    raw = canonical_json(body_of(artifact))
    digest = digest_bytes(raw)
    if digest != artifact["payload_digest"]:
        raise SignatureError("artifact digest does not match its body", code="EVIDENCE_DIGEST_MISMATCH",
                             details={"claimed": artifact["payload_digest"]})
    key = keyring.get(str(artifact["kid"]))
    signature = str(artifact["signature"])
    if not _SIGNED_HERE.made(key.raw, digest, signature):
        key.verify_pae(PAYLOAD_TYPE, raw, b64d(signature))
    return key.kid


class _OwnSignatures:
    """The signatures this process made, by (public key bytes, digest of the signed
    body, signature): verifying one of them again cannot fail, since Ed25519
    signing is deterministic, so `verify_artifact` answers from here instead of
    paying for the curve arithmetic (a verification costs about four signings).

    Sound because the entry is made only by `sign_artifact` itself, keyed on the
    exact bytes signed (their SHA-256, recomputed by the verifier from the body
    it holds) and the verifying key's own bytes: a changed body, another key or
    another signature misses and is verified in full. Bounded: when full it is
    emptied, and what it forgot is verified the long way."""

    LIMIT = 200_000

    def __init__(self) -> None:
        self._made: set[tuple[bytes, str, str]] = set()

    def note(self, public: bytes, digest: str, signature: str) -> None:
        if len(self._made) >= self.LIMIT:
            self._made.clear()
        self._made.add((public, digest, signature))

    def made(self, public: bytes, digest: str, signature: str) -> bool:
        return (public, digest, signature) in self._made


_SIGNED_HERE = _OwnSignatures()


INTOTO_STATEMENT = "https://in-toto.io/Statement/v1"
INTOTO_PAYLOAD = "application/vnd.in-toto+json"


@dataclass(frozen=True)
class Record:
    sequence: int
    topic: str
    artifact: Mapping[str, Any]

    @classmethod
    def from_event(cls, ev: Any) -> "Record":
        get = (lambda k: ev[k]) if isinstance(ev, Mapping) else (lambda k: getattr(ev, k))
        return cls(int(get("sequence")), str(get("topic")), get("payload"))


@dataclass(frozen=True)
class GitFacts:
    """What the shell read from git for the commits the evidence names."""

    commits: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # sha -> {tree, parents, trailers}


@dataclass
class Link:
    link: str
    status: str  # ok | missing | failing | invalid
    detail: str = ""
    refs: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"link": self.link, "status": self.status, "detail": self.detail,
                "refs": self.refs}


@dataclass
class ChainResult:
    passed: bool
    links: list[Link]
    head_ref: str | None
    base_ref: str | None
    included: list[str]
    required_suites: list[str]
    human_gate: bool
    evidence_refs: list[dict[str, Any]]
    stack_plan_id: str | None

    @property
    def missing(self) -> list[str]:
        return [f"{l.link}: {l.status}" + (f" ({l.detail})" if l.detail else "")
                for l in self.links if l.status != "ok"]

    @property
    def only_consent_missing(self) -> bool:
        bad = [l for l in self.links if l.status != "ok"]
        return bool(bad) and all(l.link == "consent" and l.status == "missing" for l in bad)

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "head_ref": self.head_ref, "base_ref": self.base_ref,
                "included_proposals": self.included, "required_suites": self.required_suites,
                "human_gate": self.human_gate, "links": [l.to_dict() for l in self.links],
                "missing": self.missing, "evidence_refs": self.evidence_refs,
                "stack_plan_id": self.stack_plan_id}


def policy_from_record(artifact: Mapping[str, Any]) -> IntegrationPolicy:
    """The IntegrationPolicy a run recorded (its `integration.policy` artifact)."""
    return IntegrationPolicy(**{k: (tuple(v) if isinstance(v, list) else
                                    ({kk: tuple(vv) for kk, vv in v.items()} if isinstance(v, dict) else v))
                                for k, v in artifact["policy"].items()})


def evidence_ref(rec: Record) -> dict[str, Any]:
    a = rec.artifact
    oid = (a.get("object_id") or a.get("stack_plan_id") or a.get("report_id")
           or a.get("decision_id") or a.get("proposal_id") or a.get("checkpoint_id") or "")
    return {"kind": a.get("artifact_kind", "dome.unknown/v1"), "object_id": str(oid),
            "digest": a.get("payload_digest") or digest_json(body_of(a)),
            "event_sequence": rec.sequence}


def _subjects(a: Mapping[str, Any]) -> list[dict[str, Any]]:
    subs: list[dict[str, Any]] = []
    for k in ("from_head_ref", "head_ref", "commit"):
        v = a.get(k)
        if isinstance(v, str) and len(v) in (40, 64):
            subs.append({"name": f"git+commit:{v}", "digest": {"gitCommit": v}})
            break
    for d in a.get("artifact_digests", []) or []:
        subs.append({"name": f"artifact:{d}", "digest": {"sha256": d.split(":", 1)[1]}})
    if a.get("diff_digest"):
        subs.append({"name": f"diff:{a.get('proposal_id')}",
                     "digest": {"sha256": str(a["diff_digest"]).split(":", 1)[1]}})
    if not subs:
        subs.append({"name": f"dome:{a.get('artifact_kind')}:{a.get('object_id')}",
                     "digest": {"sha256": str(a.get("payload_digest", "sha256:" + "0" * 64)).split(":", 1)[1]}})
    return subs


def intoto_statements(records: Sequence[Record], decision: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The in-toto v1 Statements exported beside a promotion decision: one per
    evidence record the decision references (in ledger order), then the decision."""
    wanted = {r["event_sequence"] for r in decision.get("evidence_refs", [])}
    arts = [r.artifact for r in sorted(records, key=lambda r: r.sequence) if r.sequence in wanted] + [decision]
    return [{"_type": INTOTO_STATEMENT, "subject": _subjects(a),
             "predicateType": "https://dome.dev/attestations/"
                              + str(a.get("artifact_kind", "dome.unknown/v1")).split(".", 1)[1],
             "predicate": a} for a in arts]
