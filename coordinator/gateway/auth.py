"""Grant issuance and verification as the gateway needs them.

The grants area owns ToolProfiles (`coordinator/grants.py`, `registry/toolprofile.py`).
This adapter is the one place the run loop and the gateway touch grants:
`issue()` for each attempt (fresh jti, bound to run, wave and
node_execution_id, short TTL) and `verify()` on every gateway call. Token
format: "dgt1." + base64url(canonical DSSE envelope) of the canonical
ToolProfile, payload type PAYLOAD_TYPE, signed with the coordinator key.

Single use: a grant is spent (its jti recorded through the ledger's
`spend_jti`) by the attempt's terminal write, `complete_task`; any later call
with it fails GRANT_REPLAYED. Revocation (endgame losers, timed-out and lost
attempts) goes through `ledger.revoke` and is checked on every call.
"""
from __future__ import annotations

import base64
import json
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

from registry.canonical import CANONICALIZATION, canonical_json, digest_json
from registry.errors import DomeError, SignatureError
from registry.signing import Keyring, SigningKey, dsse_sign, dsse_verify

PAYLOAD_TYPE = "application/vnd.dome.toolprofile+json"
TOKEN_PREFIX = "dgt1."
AUDIENCE = "worker_runtime"
LEEWAY_S = 5.0
CONTRACT = "dome.patch_proposal@1.0.0"

# capability class -> methods (the resolver's mapping for worker-facing tools)
CAPABILITY_METHODS = {
    "read": ("get_task",),
    "write": ("report_progress", "put_artifact", "submit_patch", "submit_metadata"),
}
ALWAYS = ("complete_task", "report_progress")  # every attempt reports liveness and its result


class GrantRejected(DomeError):
    code = "GRANT_REJECTED"


def _rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _epoch(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


def b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64u(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def envelope_to_token(envelope: Mapping[str, Any]) -> str:
    return TOKEN_PREFIX + b64u(canonical_json(envelope))


def token_to_envelope(token: str) -> dict[str, Any]:
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX) or len(token) > 65536:
        raise GrantRejected("not a dome grant token", details={"code": "GRANT_MALFORMED"})
    try:
        env = json.loads(unb64u(token[len(TOKEN_PREFIX):]))
    except (ValueError, UnicodeDecodeError):
        raise GrantRejected("grant token is not a DSSE envelope", details={"code": "GRANT_MALFORMED"}) from None
    if not isinstance(env, dict):
        raise GrantRejected("grant token is not a DSSE envelope", details={"code": "GRANT_MALFORMED"})
    return env


def methods_for(capabilities: list[str]) -> list[str]:
    out = set(ALWAYS)
    for cap in capabilities:
        out.update(CAPABILITY_METHODS.get(cap.split(":", 1)[0], ()))
    return sorted(out)


@dataclass(frozen=True)
class IssuedGrant:
    token: str
    envelope: dict[str, Any]
    profile: dict[str, Any]

    @property
    def profile_ref(self) -> str:
        return digest_json(self.profile)


class GrantAuthority:
    def __init__(self, key: SigningKey, keyring: Keyring, ledger: Any = None) -> None:
        self.key = key
        self.keyring = keyring
        self.ledger = ledger

    def issue(self, *, run_id: str, wave_id: str, node_id: str, node_execution_id: str,
              capabilities: list[str], ttl_s: float, budgets: Mapping[str, Any] | None = None,
              constraints: Mapping[str, Any] | None = None, policy_version: str = "default@1") -> IssuedGrant:
        now = time.time()
        jti = secrets.token_urlsafe(18)
        profile = {
            "artifact_kind": "dome.tool_profile/v1", "version": "1.0.0",
            "object_id": f"tp-{node_execution_id}", "profile_id": f"tp-{node_execution_id}",
            "contract_id": CONTRACT, "run_id": run_id, "wave_id": wave_id, "node_id": node_id,
            "node_execution_id": node_execution_id, "created_at": _rfc3339(now),
            "issued_at": _rfc3339(now), "expires_at": _rfc3339(now + ttl_s),
            "jti": jti, "audience": AUDIENCE, "single_use": True,
            "allowed_capabilities": sorted(set(capabilities)), "allowed_methods": methods_for(capabilities),
            "constraints": dict(constraints or {}), "budgets": dict(budgets or {}),
            "issuer": "coordinator", "producer": "coordinator", "policy_version": policy_version,
            "kid": self.key.kid, "canonicalization": CANONICALIZATION,
        }
        envelope = dsse_sign(PAYLOAD_TYPE, canonical_json(profile), self.key)
        return IssuedGrant(token=envelope_to_token(envelope), envelope=envelope, profile=profile)

    def verify(self, token: str, *, method: str | None, run_id: str, now: float | None = None) -> dict[str, Any]:
        """Signature, payload type, audience, run binding, time, revocation, method. Returns the profile."""
        env = token_to_envelope(token)
        try:
            payload, _kid = dsse_verify(env, self.keyring, expected_type=PAYLOAD_TYPE)
        except SignatureError as exc:
            raise GrantRejected(f"grant signature: {exc.message}", details={"code": exc.code}) from None
        profile = json.loads(payload)
        if profile.get("audience") != AUDIENCE:
            raise GrantRejected("grant audience mismatch", details={"code": "GRANT_WRONG_AUDIENCE"})
        if profile.get("run_id") != run_id:
            raise GrantRejected("grant is for another run", details={"code": "GRANT_WRONG_RUN"})
        now = time.time() if now is None else now
        if now - LEEWAY_S >= _epoch(profile["expires_at"]):
            raise GrantRejected("grant expired", details={"code": "GRANT_EXPIRED"})
        if now + LEEWAY_S < _epoch(profile["issued_at"]):
            raise GrantRejected("grant not yet valid", details={"code": "GRANT_NOT_YET_VALID"})
        if self.ledger is not None and self.ledger.is_revoked(profile["jti"], profile["profile_id"]):
            raise GrantRejected("grant was revoked", details={"code": "GRANT_REVOKED"})
        if method is not None and method not in profile["allowed_methods"]:
            raise GrantRejected(f"method {method!r} is not in this grant",
                                details={"code": "METHOD_NOT_GRANTED", "method": method})
        return profile
