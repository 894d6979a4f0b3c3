"""Sealing an artifact: its payload_digest and in-body signature.

One rule for every area (worker_sdk builds proposals, the coordinator signs
plans, results and decisions, `dome verify` checks them):

    body           = the artifact without payload_digest, canonicalization, kid, signature
    payload_digest = sha256 over RFC 8785 canonical JSON of body
    canonicalization = "rfc8785-jcs"
    signature      = Ed25519 over DSSE PAE(payload_type, canonical JSON of body)

The body of a parsed artifact has exactly one canonical form, so checking a
seal recomputes it; a DSSE envelope made by `to_dsse` carries those same
bytes and the same signature for third-party tools.
"""
from __future__ import annotations

from typing import Any, Mapping

from .canonical import CANONICALIZATION, canonical_json, digest_bytes
from .errors import SignatureError
from .signing import Keyring, SigningKey, b64d, b64e

ARTIFACT_PAYLOAD_TYPE = "application/vnd.dome.artifact+json"
SEAL_FIELDS = ("payload_digest", "canonicalization", "kid", "signature")


class SealError(SignatureError):
    """An artifact's seal is missing or does not match its body."""

    code = "ARTIFACT_SEAL_INVALID"


def body_of(artifact: Mapping[str, Any]) -> dict[str, Any]:
    """The artifact without its seal fields: what is digested and signed."""
    return {k: v for k, v in artifact.items() if k not in SEAL_FIELDS}


def payload_digest_of(artifact: Mapping[str, Any]) -> str:
    return digest_bytes(canonical_json(body_of(artifact)))


def seal(artifact: Mapping[str, Any], key: SigningKey | None = None, *,
         payload_type: str = ARTIFACT_PAYLOAD_TYPE) -> dict[str, Any]:
    """A copy of `artifact` with payload_digest and canonicalization set and,
    with a key, kid and signature. Old seal fields are replaced."""
    body = body_of(artifact)
    raw = canonical_json(body)
    out = {**body, "payload_digest": digest_bytes(raw), "canonicalization": CANONICALIZATION}
    if key is not None:
        out["kid"] = key.kid
        out["signature"] = b64e(key.sign_pae(payload_type, raw))
    return out


def check_seal(artifact: Mapping[str, Any], keyring: Keyring | None = None, *,
               payload_type: str = ARTIFACT_PAYLOAD_TYPE, require_signature: bool = True) -> str | None:
    """Check the digest and (when required or present) the signature.

    Returns the kid that verified, or None for an unsigned artifact accepted
    with require_signature=False. Codes: ARTIFACT_UNSEALED (a seal field is
    missing), UNKNOWN_CANONICALIZATION, ARTIFACT_DIGEST_MISMATCH, and the
    signing codes UNKNOWN_KID / SIGNATURE_INVALID / SIGNATURE_MALFORMED."""
    digest = artifact.get("payload_digest")
    if not isinstance(digest, str):
        raise SealError("artifact has no payload_digest", code="ARTIFACT_UNSEALED",
                        details={"field": "payload_digest"})
    if artifact.get("canonicalization") != CANONICALIZATION:
        raise SealError(f"unknown canonicalization {artifact.get('canonicalization')!r}",
                        code="UNKNOWN_CANONICALIZATION",
                        details={"canonicalization": artifact.get("canonicalization"),
                                 "supported": [CANONICALIZATION]})
    raw = canonical_json(body_of(artifact))
    if digest_bytes(raw) != digest:
        raise SealError("payload_digest does not match the artifact's body", code="ARTIFACT_DIGEST_MISMATCH",
                        details={"claimed": digest, "computed": digest_bytes(raw)})
    signed = "signature" in artifact or "kid" in artifact
    if not signed:
        if require_signature:
            raise SealError("artifact is not signed", code="ARTIFACT_UNSEALED", details={"field": "signature"})
        return None
    kid, sig = artifact.get("kid"), artifact.get("signature")
    if not isinstance(kid, str) or not isinstance(sig, str):
        raise SealError("kid and signature must both be strings", code="ARTIFACT_UNSEALED",
                        details={"field": "kid" if not isinstance(kid, str) else "signature"})
    if keyring is None:
        raise SealError("a keyring is needed to check a signature", code="ARTIFACT_UNSEALED")
    key = keyring.get(kid)
    key.verify_pae(payload_type, raw, b64d(sig))
    return key.kid


def to_dsse(artifact: Mapping[str, Any], *, payload_type: str = ARTIFACT_PAYLOAD_TYPE) -> dict[str, Any]:
    """The signed artifact as a standalone DSSE envelope (same bytes, same signature)."""
    if not isinstance(artifact.get("kid"), str) or not isinstance(artifact.get("signature"), str):
        raise SealError("artifact is not signed", code="ARTIFACT_UNSEALED")
    return {"payloadType": payload_type, "payload": b64e(canonical_json(body_of(artifact))),
            "signatures": [{"keyid": artifact["kid"], "sig": artifact["signature"]}]}
