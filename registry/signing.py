"""Ed25519 keys, key ids and DSSE envelopes.

Signatures are always over the DSSE pre-authentication encoding (PAE) of a
payload type and the exact payload bytes. Verification checks those bytes
as stored; it never re-serializes a parsed object before checking.
"""
from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any, Mapping

import nacl.exceptions
import nacl.signing
import nacl.utils

from .canonical import canonical_json
from .errors import SignatureError

KID_PREFIX = "ed25519:"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def kid_for(verify_key_bytes: bytes) -> str:
    """Stable key id: a prefix of the sha256 of the raw public key."""
    return KID_PREFIX + hashlib.sha256(verify_key_bytes).hexdigest()[:32]


def b64e(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64d(text: str) -> bytes:
    """Strict base64: standard alphabet, padded, and canonical (the only
    encoding of its bytes), so one payload has exactly one stored text."""
    if not isinstance(text, str):
        raise SignatureError("base64 field is not a string", code="SIGNATURE_MALFORMED")
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError) as exc:
        raise SignatureError("malformed base64", code="SIGNATURE_MALFORMED") from exc
    if b64e(data) != text:
        raise SignatureError("non-canonical base64", code="SIGNATURE_MALFORMED")
    return data


@dataclass(frozen=True)
class PublicKey:
    kid: str
    raw: bytes

    @classmethod
    def from_raw(cls, raw: bytes) -> "PublicKey":
        return cls(kid=kid_for(raw), raw=raw)

    def verify_pae(self, payload_type: str, payload: bytes, signature: bytes) -> None:
        try:
            nacl.signing.VerifyKey(self.raw).verify(pae(payload_type, payload), signature)
        except (nacl.exceptions.BadSignatureError, ValueError) as exc:
            raise SignatureError(
                "signature does not verify", code="SIGNATURE_INVALID",
                details={"kid": self.kid, "payload_type": payload_type},
            ) from exc


class SigningKey:
    """An Ed25519 private key with its key id."""

    def __init__(self, seed: bytes) -> None:
        if len(seed) != 32:
            raise SignatureError("an Ed25519 seed is 32 bytes", code="KEY_INVALID")
        self._key = nacl.signing.SigningKey(seed)
        self.public = PublicKey.from_raw(bytes(self._key.verify_key))

    @classmethod
    def generate(cls) -> "SigningKey":
        """A new key from 32 random bytes of libsodium's generator (the key pair derived once)."""
        return cls(nacl.utils.random(32))

    @property
    def kid(self) -> str:
        return self.public.kid

    @property
    def seed(self) -> bytes:
        return bytes(self._key)

    def sign_pae(self, payload_type: str, payload: bytes) -> bytes:
        return self._key.sign(pae(payload_type, payload)).signature


class Keyring:
    """Known public keys by kid; unknown kids fail closed."""

    def __init__(self, keys: Mapping[str, PublicKey] | None = None) -> None:
        self._keys: dict[str, PublicKey] = {}
        for kid, key in (keys or {}).items():
            if kid != key.kid:
                raise SignatureError(f"keyring entry {kid!r} holds key {key.kid!r}", code="KEY_INVALID")
            self.add(key)

    def add(self, key: PublicKey) -> None:
        """Add a public key; its kid must be the one derived from its bytes."""
        if key.kid != kid_for(key.raw):
            raise SignatureError(f"kid {key.kid!r} does not match the key's bytes", code="KEY_INVALID",
                                 details={"kid": key.kid, "expected": kid_for(key.raw)})
        self._keys[key.kid] = key

    def get(self, kid: str) -> PublicKey:
        try:
            return self._keys[kid]
        except KeyError:
            raise SignatureError(f"unknown key id {kid!r}", code="UNKNOWN_KID",
                                 details={"kid": kid}) from None

    def __contains__(self, kid: object) -> bool:
        return kid in self._keys

    def kids(self) -> list[str]:
        return sorted(self._keys)


def dsse_sign(payload_type: str, payload: bytes, key: SigningKey) -> dict[str, Any]:
    """A DSSE envelope over `payload` (bytes, stored base64 as-is)."""
    return {
        "payloadType": payload_type,
        "payload": b64e(payload),
        "signatures": [{"keyid": key.kid, "sig": b64e(key.sign_pae(payload_type, payload))}],
    }


def dsse_sign_json(payload_type: str, obj: Any, key: SigningKey) -> dict[str, Any]:
    return dsse_sign(payload_type, canonical_json(obj), key)


def dsse_verify(
    envelope: Mapping[str, Any], keyring: Keyring, *, expected_type: str | None = None
) -> tuple[bytes, str]:
    """Verify a DSSE envelope; return (payload bytes, kid that verified).

    The signature is checked over the payload bytes exactly as stored (base64
    decoded), never over a re-serialization. Checks run in a fixed order so
    each failure has one code: shape (SIGNATURE_MALFORMED), payload type
    (WRONG_PAYLOAD_TYPE), known key (UNKNOWN_KID: no signature names a key in
    the keyring), signature (SIGNATURE_INVALID). Signatures by unknown keys
    are skipped when another signature is by a known key; one valid
    signature by a known key suffices.
    """
    if not isinstance(envelope, Mapping):
        raise SignatureError("not a DSSE envelope", code="SIGNATURE_MALFORMED")
    try:
        payload_type = envelope["payloadType"]
        payload_text = envelope["payload"]
        sigs = envelope["signatures"]
    except KeyError as exc:
        raise SignatureError(f"not a DSSE envelope: no {exc.args[0]!r}", code="SIGNATURE_MALFORMED") from exc
    if not isinstance(payload_type, str) or not isinstance(sigs, list) or not sigs:
        raise SignatureError("not a DSSE envelope", code="SIGNATURE_MALFORMED")
    payload = b64d(payload_text)
    entries: list[tuple[str, bytes]] = []
    for entry in sigs:
        if (not isinstance(entry, Mapping) or not isinstance(entry.get("keyid"), str)
                or "sig" not in entry):
            raise SignatureError("malformed signature entry", code="SIGNATURE_MALFORMED")
        entries.append((entry["keyid"], b64d(entry["sig"])))
    if expected_type is not None and payload_type != expected_type:
        raise SignatureError(
            f"payload type {payload_type!r} is not {expected_type!r}",
            code="WRONG_PAYLOAD_TYPE",
            details={"payload_type": payload_type, "expected": expected_type},
        )
    known = [(kid, sig) for kid, sig in entries if kid in keyring]
    if not known:
        kids = [kid for kid, _ in entries]
        raise SignatureError(f"unknown key id {kids[0]!r}", code="UNKNOWN_KID",
                             details={"kid": kids[0], "kids": kids})
    last: SignatureError | None = None
    for kid, sig in known:
        key = keyring.get(kid)
        try:
            key.verify_pae(payload_type, payload, sig)
            return payload, key.kid
        except SignatureError as exc:
            last = exc
    assert last is not None
    raise last
