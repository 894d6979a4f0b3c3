"""Signed ToolProfiles (grants): payload, DSSE signature, bearer token, call proofs.

Pure functions; the coordinator supplies keys, clocks and ledger state.

Token: the compact serialization of a one-signature DSSE envelope,

    "dgt1." b64u(payloadType) "." b64u(payload) "." b64u(keyid) "." b64u(sig)

(base64url without padding; every character is legal in an HTTP bearer
token). `token_to_envelope` / `envelope_to_token` convert to and from the
standard JSON DSSE envelope {payloadType, payload, signatures:[{keyid,
sig}]}. The payload is the RFC 8785 canonical JSON of the ToolProfile; the
Ed25519 signature is over the DSSE PAE of (PAYLOAD_TYPE, payload bytes).
Verification checks the bytes as received and only then parses them.

Sender-constrained grants carry `cnf` (the worker's Ed25519 public key).
Every call must then carry a CallProof: a DSSE signature by that key, type
CALL_PROOF_TYPE, over canonical {jti, method, args_digest, idempotency_key,
ts}. A stolen bearer token without the worker's private key is useless.

The warm form of the same proof is a keyed MAC (`make_call_mac`):
HMAC-SHA256 under a key both ends derive from the attempt's worker key seed
(`call_mac_key`), which the coordinator registers for the grant's jti when it
starts the attempt. It proves possession of the same secret and binds the same
fields, at the cost of one HMAC instead of an Ed25519 verification.
"""
from __future__ import annotations

import base64
import binascii
import hmac
import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

import nacl.exceptions
import nacl.signing

from .canonical import CANONICALIZATION, canonical_json, digest_bytes, digest_json
from .grant_errors import (
    GrantExpired, GrantMalformed, GrantNotYetValid, GrantPayloadInvalid, GrantProofInvalid, GrantProofMismatch,
    GrantProofMissing, GrantProofStale,
    GrantSignatureInvalid, GrantUnknownKid, GrantWrongAudience, GrantWrongPayloadType, GrantWrongRun,
    GrantWrongWave, GrantWrongWorker,
)
from .signing import Keyring, SigningKey, b64e, kid_for, pae

PAYLOAD_TYPE = "application/vnd.dome.toolprofile+json"
CALL_PROOF_TYPE = "application/vnd.dome.callproof+json"
PROOF_HEADER = "dome-call-proof"  # the HTTP header a worker sends its per-call proof in
TOKEN_PREFIX = "dgt1."
ARTIFACT_KIND = "dome.tool_profile/v1"
# the payload fields that differ between the grants of one scope (ids, times, the worker's key, the seed)
PER_ATTEMPT_FIELDS = frozenset({"object_id", "profile_id", "run_id", "wave_id", "node_id", "node_execution_id",
                                "created_at", "subject", "issued_at", "not_before", "expires_at", "jti",
                                "worker_id", "cnf", "determinism_seed", "inputs_hash"})
SCHEMA_VERSION = "1.0.0"  # the ToolProfile `version` field
MAX_LEEWAY_SECONDS = 60
MAX_TOKEN_BYTES = 64 * 1024

# the verification order; each step's failures have their own codes
CHECK_ORDER = ("signature", "payload_type", "audience", "binding", "time", "jti", "revocation", "method", "budget")


# ---- time ------------------------------------------------------------------
_RFC3339: dict[datetime, str] = {}  # the last few instants formatted (a grant names three, most shared)


def rfc3339(dt: datetime) -> str:
    """The UTC second of `dt` as "YYYY-MM-DDTHH:MM:SSZ" (the same instant, the same text)."""
    text = _RFC3339.get(dt)
    if text is None:
        u = dt.astimezone(timezone.utc)  # four-digit years: strftime's %Y writes year 1 as "1" on glibc
        text = f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}Z"
        if len(_RFC3339) >= 64:
            _RFC3339.clear()
        _RFC3339[dt] = text
    return text


def parse_rfc3339(text: str) -> datetime:
    if not isinstance(text, str) or not text.endswith("Z"):
        raise ValueError(f"not a UTC RFC 3339 timestamp: {text!r}")
    return datetime.fromisoformat(text[:-1] + "+00:00")


def epoch(text: str) -> float:
    return parse_rfc3339(text).timestamp()


# ---- base64url ---------------------------------------------------------------
def b64u_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


_URLSAFE = str.maketrans("-_", "+/")
_B64U_INDEX = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")}


def b64u_decode(text: str) -> bytes:
    """Canonical base64url without padding. Non-canonical spellings (unused
    trailing bits set, '+' or '/' or '=' in the text) are refused, so one
    grant has exactly one token string."""
    try:
        if "+" in text or "/" in text or "=" in text:
            raise ValueError("not base64url")
        data = binascii.a2b_base64((text.translate(_URLSAFE) + "=" * (-len(text) % 4)).encode("ascii"),
                                   strict_mode=True)
    except (binascii.Error, ValueError, UnicodeEncodeError, AttributeError, TypeError) as exc:
        raise GrantMalformed("token is not base64url") from exc
    unused = (0, 0, 0xF, 0x3)[len(text) % 4]  # low bits of the last character that encode nothing
    if unused and _B64U_INDEX[text[-1]] & unused:
        raise GrantMalformed("token is not canonical base64url")
    return data


def _b64d(text: Any, what: str) -> bytes:
    if not isinstance(text, str):
        raise GrantMalformed(f"{what} is not a string")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError) as exc:
        raise GrantMalformed(f"{what} is not base64") from exc


# ---- payload, signing, token -------------------------------------------------
def build_payload(*, profile_id: str, contracts: list[dict[str, Any]], primary_contract: str,
                  policy_version: str, policy_ref: str, card_ref: str | None, resolver_ref: str | None,
                  issued_at: datetime, ttl_seconds: int, jti: str, audience: str,
                  run_id: str, wave_id: str, node_id: str, node_execution_id: str, worker_id: str | None,
                  single_use: bool, capabilities: list[str], allowed_methods: list[str],
                  constraints: Mapping[str, Any], budgets: Mapping[str, Any], issuer: str,
                  cnf_public_key: bytes | None = None, determinism_seed: int | None = None,
                  inputs_hash: str | None = None, not_before: datetime | None = None) -> dict[str, Any]:
    """The ToolProfile payload (registry/schemas/tool_profile.json). The
    signature and key id live in the DSSE envelope around these bytes."""
    p: dict[str, Any] = {
        "artifact_kind": ARTIFACT_KIND, "version": SCHEMA_VERSION, "object_id": profile_id,
        "profile_id": profile_id, "run_id": run_id, "wave_id": wave_id, "node_id": node_id,
        "node_execution_id": node_execution_id, "created_at": rfc3339(issued_at), "producer": issuer,
        "subject": worker_id or node_execution_id,
        "contract_id": primary_contract, "contracts": contracts,
        "policy_version": policy_version, "policy_ref": policy_ref,
        "issued_at": rfc3339(issued_at), "not_before": rfc3339(not_before or issued_at),
        "expires_at": rfc3339(issued_at + timedelta(seconds=ttl_seconds)),
        "jti": jti, "audience": audience, "single_use": single_use,
        "allowed_capabilities": sorted(capabilities), "allowed_methods": sorted(allowed_methods),
        "constraints": dict(constraints), "budgets": dict(budgets), "issuer": issuer,
        "canonicalization": CANONICALIZATION,
    }
    if card_ref is not None:
        p["card_ref"] = card_ref
    if resolver_ref is not None:
        p["resolver_ref"] = resolver_ref
    if worker_id is not None:
        p["worker_id"] = worker_id
    if cnf_public_key is not None:
        p["cnf"] = {"kid": kid_for(cnf_public_key), "public_key": b64e(cnf_public_key)}
    if determinism_seed is not None:
        p["determinism_seed"] = determinism_seed
    if inputs_hash is not None:
        p["inputs_hash"] = inputs_hash
    return p


def signed_artifact(payload: Mapping[str, Any], envelope: Mapping[str, Any]) -> dict[str, Any]:
    """The stored form of a grant: payload + payload_digest, kid and the DSSE signature."""
    return {**payload, "payload_digest": digest_json(payload), "canonicalization": CANONICALIZATION,
            "kid": envelope["signatures"][0]["keyid"], "signature": envelope["signatures"][0]["sig"]}


def sign_payload(payload: Mapping[str, Any], key: SigningKey, *, payload_type: str = PAYLOAD_TYPE) -> dict[str, Any]:
    return sign_body(canonical_json(payload), key, payload_type=payload_type)[0]


def sign_body(body: bytes, key: SigningKey, *, payload_type: str = PAYLOAD_TYPE) -> tuple[dict[str, Any], str]:
    """(DSSE envelope, compact token) over `body`, the payload's canonical bytes, signed once:
    the token is what `envelope_to_token(envelope)` gives, made without decoding the envelope."""
    sig = key.sign_pae(payload_type, body)
    envelope = {"payloadType": payload_type, "payload": b64e(body), "signatures": [{"keyid": key.kid, "sig": b64e(sig)}]}
    return envelope, _compact_token(payload_type.encode("utf-8"), body, str(key.kid).encode("utf-8"), sig)


def _compact_token(payload_type: bytes, body: bytes, kid: bytes, sig: bytes) -> str:
    """The compact token form (what `parse_token` reads): the four parts, base64url, dot-joined."""
    return TOKEN_PREFIX + ".".join(b64u_encode(p) for p in (payload_type, body, kid, sig))


def envelope_to_token(envelope: Mapping[str, Any]) -> str:
    try:
        sigs = envelope["signatures"]
        if not isinstance(sigs, list) or len(sigs) != 1:
            raise GrantMalformed("a grant carries exactly one signature")
        parts = [envelope["payloadType"].encode("utf-8"), _b64d(envelope["payload"], "payload"),
                 str(sigs[0]["keyid"]).encode("utf-8"), _b64d(sigs[0]["sig"], "signature")]
    except (KeyError, TypeError, AttributeError) as exc:
        raise GrantMalformed("not a DSSE envelope") from exc
    return _compact_token(*parts)


def parse_token(token: Any) -> tuple[str, bytes, str, bytes]:
    """(payloadType, payload bytes, keyid, signature) of a compact token."""
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX):
        raise GrantMalformed(f"a grant token starts with {TOKEN_PREFIX!r}")
    if len(token) > MAX_TOKEN_BYTES:
        raise GrantMalformed("grant token too large", details={"limit": MAX_TOKEN_BYTES})
    parts = token[len(TOKEN_PREFIX):].split(".")
    if len(parts) != 4:
        raise GrantMalformed("a grant token has four dot-separated parts")
    try:
        ptype, kid = _header(parts[0]), _header(parts[2])
    except UnicodeDecodeError as exc:
        raise GrantMalformed("grant token header is not UTF-8") from exc
    return ptype, b64u_decode(parts[1]), kid, b64u_decode(parts[3])


_HEADERS: dict[str, str] = {}


def _header(part: str) -> str:
    """Decode the small, highly repeated parts (payload type, key id) once."""
    hit = _HEADERS.get(part)
    if hit is None:
        hit = b64u_decode(part).decode("utf-8")
        if len(_HEADERS) < 1024:
            _HEADERS[part] = hit
    return hit


def token_to_envelope(token: str) -> dict[str, Any]:
    """The standard JSON DSSE envelope of a token (for export and inspection)."""
    ptype, payload, kid, sig = parse_token(token)
    return {"payloadType": ptype, "payload": b64e(payload), "signatures": [{"keyid": kid, "sig": b64e(sig)}]}


def token_digest(token: str) -> str:
    return digest_bytes(token.encode("ascii", "replace"))


_VERIFY_KEYS: dict[bytes, nacl.signing.VerifyKey] = {}


def _verify_key(raw: bytes) -> nacl.signing.VerifyKey:
    vk = _VERIFY_KEYS.get(raw)
    if vk is None:
        vk = _VERIFY_KEYS[raw] = nacl.signing.VerifyKey(raw)
    return vk


@dataclass(frozen=True)
class SignedEnvelope:
    payload_type: str
    payload: bytes
    kid: str


def verify_token_signature(token: Any, keyring: Keyring) -> SignedEnvelope:
    """Check 1: a known kid signed PAE(payloadType, payload). The payload type
    is authenticated here but judged by the next check."""
    ptype, payload, kid, sig = parse_token(token)
    if kid not in keyring:
        raise GrantUnknownKid(f"grant signed by unknown key id {kid!r}", details={"kid": kid},
                              hints=["the issuing coordinator's public key must be in ops/keys/*.pub"])
    try:
        _verify_key(keyring.get(kid).raw).verify(pae(ptype, payload), sig)
    except (nacl.exceptions.BadSignatureError, ValueError, TypeError) as exc:
        raise GrantSignatureInvalid("grant signature does not verify", details={"kid": kid}) from exc
    return SignedEnvelope(payload_type=ptype, payload=payload, kid=kid)


def check_payload_type(signed: SignedEnvelope) -> dict[str, Any]:
    """Check 2: the signed type is a ToolProfile; parse the payload."""
    if signed.payload_type != PAYLOAD_TYPE:
        raise GrantWrongPayloadType(f"payload type {signed.payload_type!r} is not {PAYLOAD_TYPE!r}",
                                    details={"payload_type": signed.payload_type, "expected": PAYLOAD_TYPE})
    try:
        payload = json.loads(signed.payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise GrantPayloadInvalid("grant payload is not JSON") from exc
    if not isinstance(payload, dict) or payload.get("artifact_kind") != ARTIFACT_KIND:
        raise GrantPayloadInvalid(f"grant payload is not a {ARTIFACT_KIND}")
    return payload


def check_audience(payload: Mapping[str, Any], audience: str) -> None:
    if payload.get("audience") != audience:
        raise GrantWrongAudience(f"grant is for audience {payload.get('audience')!r}, not {audience!r}",
                                 details={"grant": payload.get("audience"), "expected": audience})


def check_binding(payload: Mapping[str, Any], *, run_id: str, wave_id: str, worker_id: str | None) -> None:
    if payload.get("run_id") != run_id:
        raise GrantWrongRun(f"grant is bound to run {payload.get('run_id')!r}, not {run_id!r}",
                            details={"grant": payload.get("run_id"), "expected": run_id})
    if payload.get("wave_id") != wave_id:
        raise GrantWrongWave(f"grant is bound to wave {payload.get('wave_id')!r}, not {wave_id!r}",
                             details={"grant": payload.get("wave_id"), "expected": wave_id})
    bound = payload.get("worker_id")
    if bound is not None and bound != worker_id:
        raise GrantWrongWorker(f"grant is bound to worker {bound!r}, not {worker_id!r}",
                               details={"grant": bound, "expected": worker_id})


def check_time(payload: Mapping[str, Any], now: float, leeway: float) -> None:
    leeway = min(max(leeway, 0.0), MAX_LEEWAY_SECONDS)
    nbf, exp = epoch(payload["not_before"]), epoch(payload["expires_at"])
    if now + leeway < nbf:
        raise GrantNotYetValid(f"grant is valid from {payload['not_before']}",
                               details={"not_before": payload["not_before"], "leeway_seconds": leeway})
    if now - leeway >= exp:
        raise GrantExpired(f"grant expired at {payload['expires_at']}",
                           details={"expires_at": payload["expires_at"], "leeway_seconds": leeway},
                           hints=["ask the coordinator for a fresh grant"])


# ---- call proofs (sender-constrained grants) ---------------------------------------
def args_digest(args: Any) -> str:
    return digest_json(args)


def call_proof_body(*, jti: str, method: str, args: Any, idempotency_key: str | None, ts: int,
                    nonce: str | None = None) -> dict[str, Any]:
    body = {"jti": jti, "method": method, "args_digest": args_digest(args),
            "idempotency_key": idempotency_key, "ts": ts}
    if nonce is not None:  # makes a resent call's proof distinct (Ed25519 is deterministic)
        body["nonce"] = nonce
    return body


def make_call_proof(worker_key: SigningKey, *, jti: str, method: str, args: Any,
                    idempotency_key: str | None, ts: int, nonce: str | None = None) -> str:
    """What a worker sends beside its grant on every call (base64url DSSE)."""
    env = sign_payload(call_proof_body(jti=jti, method=method, args=args, idempotency_key=idempotency_key, ts=ts,
                                       nonce=nonce), worker_key, payload_type=CALL_PROOF_TYPE)
    return b64u_encode(canonical_json(env))


def check_call_proof(payload: Mapping[str, Any], proof: str | None, *, method: str, args: Any,
                     idempotency_key: str | None, now: float, leeway: float) -> bytes | None:
    """Verify the proof of possession of the grant's cnf key. Returns the
    proof signature (for replay detection) or None when the grant is bearer."""
    cnf = payload.get("cnf")
    if cnf is None:
        return None
    if not proof:
        raise GrantProofMissing("this grant is sender-constrained: the call must carry a proof signed by the worker key",
                                details={"cnf_kid": cnf.get("kid")})
    try:
        env = json.loads(b64u_decode(proof))
        raw = _b64d(cnf.get("public_key"), "cnf key")
        ptype, body = env["payloadType"], _b64d(env["payload"], "proof payload")
        sig = _b64d(env["signatures"][0]["sig"], "proof signature")
    except (GrantMalformed, KeyError, IndexError, TypeError, ValueError) as exc:
        raise GrantProofInvalid("call proof is malformed") from exc
    if ptype != CALL_PROOF_TYPE:
        raise GrantProofInvalid(f"call proof type {ptype!r} is not {CALL_PROOF_TYPE!r}")
    try:
        nacl.signing.VerifyKey(raw).verify(pae(ptype, body), sig)
    except (nacl.exceptions.BadSignatureError, ValueError) as exc:
        raise GrantProofInvalid("call proof is not signed by the grant's worker key",
                                details={"cnf_kid": cnf.get("kid")}) from exc
    try:
        claimed = json.loads(body)
    except ValueError as exc:
        raise GrantProofInvalid("call proof payload is not JSON") from exc
    expected = {"jti": payload["jti"], "method": method, "args_digest": args_digest(args),
                "idempotency_key": idempotency_key}
    for k, v in expected.items():
        if claimed.get(k) != v:
            raise GrantProofMismatch(f"call proof does not match this call ({k})", details={"field": k})
    ts = claimed.get("ts")
    if not isinstance(ts, int) or abs(now - ts) > min(max(leeway, 0.0), MAX_LEEWAY_SECONDS):
        raise GrantProofStale("call proof timestamp is outside the allowed skew", details={"ts": ts})
    return sig




# ---- keyed-MAC call proofs (the warm form) ------------------------------------------
CALL_MAC_PREFIX = "dcm1."
CALL_MAC_INFO = b"dome/call-mac/v1"
_NONCE_CHARS = frozenset("0123456789abcdef")


def call_mac_key(worker_seed: bytes) -> bytes:
    """The per-attempt MAC key: HMAC-SHA256(worker key seed, CALL_MAC_INFO). Only the
    holder of the worker key (the worker, and the coordinator that made it) can derive it."""
    return hmac.digest(bytes(worker_seed), CALL_MAC_INFO, "sha256")


def _mac_message(jti: str, method: str, args_canonical: bytes, idempotency_key: str | None, ts: str,
                 nonce: str) -> bytes:
    """Length-prefixed fields, so no two calls share a message; a missing key differs from ''.
    The arguments go in as their canonical JSON bytes (the HMAC hashes them anyway)."""
    idem = "-" if idempotency_key is None else "+" + idempotency_key
    head = "%d:%s%d:%s%d:%s%d:%s%d:%s" % (len(jti), jti, len(method), method, len(idem), idem, len(ts), ts,
                                         len(nonce), nonce)
    return b"%b%d:%b" % (head.encode("utf-8", "surrogatepass"), len(args_canonical), args_canonical)


def make_call_mac(mac_key: bytes, *, jti: str, method: str, args: Any, idempotency_key: str | None, ts: int,
                  nonce: str) -> str:
    """"dcm1.<ts>.<nonce hex>.<HMAC hex>": what a worker sends instead of a signed proof."""
    mac = hmac.digest(mac_key, _mac_message(jti, method, canonical_json(args), idempotency_key, str(int(ts)),
                                            nonce), "sha256")
    return f"{CALL_MAC_PREFIX}{int(ts)}.{nonce}.{mac.hex()}"


def is_call_mac(proof: Any) -> bool:
    return isinstance(proof, str) and proof.startswith(CALL_MAC_PREFIX)


def check_call_mac(payload: Mapping[str, Any], proof: str, mac_key: bytes | None, *, method: str,
                   args_canonical: bytes, idempotency_key: str | None, now: float, leeway: float) -> bytes:
    """Check a keyed-MAC call proof against the attempt's registered key. Returns the MAC
    (for replay detection; lowercase hex, its one spelling). Same codes as the signed proof:
    invalid, stale; a MAC over other fields cannot be told from a wrong key, so both are
    PROOF_INVALID."""
    if mac_key is None:
        raise GrantProofInvalid("no call key was established for this grant at attempt start",
                                details={"cnf_kid": (payload.get("cnf") or {}).get("kid")})
    ts, _, rest = proof[len(CALL_MAC_PREFIX):].partition(".")
    nonce, _, mac = rest.partition(".")
    if not (ts.isdigit() and ts.isascii() and len(ts) <= 12 and 8 <= len(nonce) <= 64
            and _NONCE_CHARS.issuperset(nonce) and mac.isascii()):
        raise GrantProofInvalid("call proof is malformed")
    want = hmac.digest(mac_key, _mac_message(payload["jti"], method, args_canonical, idempotency_key, ts, nonce),
                       "sha256").hex()
    if not hmac.compare_digest(want, mac):
        raise GrantProofInvalid("call proof is not keyed by the grant's worker key or does not match this call",
                                details={"cnf_kid": (payload.get("cnf") or {}).get("kid")})
    if abs(now - int(ts)) > min(max(leeway, 0.0), MAX_LEEWAY_SECONDS):
        raise GrantProofStale("call proof timestamp is outside the allowed skew", details={"ts": int(ts)})
    return mac.encode("ascii")
