"""Grant issuance: `issue_profile(...)` derives the scope (policy ∩ resolver ∩
contracts ∩ card, admin never), binds it to run/wave/node attempt (and
optionally a worker id and worker public key), signs it and, given a ledger,
records a `grant.issued` event (the payload, never the signature: the ledger
must not hold usable bearer tokens). `issued_payload(grant)` is that event's
payload and its canonical bytes. Verification is `coordinator.grants`.
"""
from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping

from ledger.protocols import EventLog
from registry import toolprofile as tp
from registry.canonical import canonical_json, digest_bytes, digest_json
from registry.contracts import Registry, default_registry
from registry.grant_scope import GrantScope, derive_scope
from registry.schema_lite import validate_varying
from registry.signing import SigningKey

ISSUED_TOPIC = "grant.issued"


@dataclass(frozen=True)
class SignedGrant:
    token: str  # the bearer token: compact DSSE "dgt1.<type>.<payload>.<kid>.<sig>"
    envelope: Mapping[str, Any]
    payload: Mapping[str, Any]
    scope: GrantScope
    payload_digest: str = ""  # digest_json(payload), from the bytes that were signed (set by issue_profile)
    payload_canonical: bytes = field(default=b"", repr=False)  # those bytes (canonical_json(payload))

    @property
    def profile_id(self) -> str:
        return self.payload["profile_id"]

    @property
    def jti(self) -> str:
        return self.payload["jti"]

    def artifact(self) -> dict[str, Any]:
        """The stored ToolProfile artifact (payload + payload_digest, kid, signature)."""
        return tp.signed_artifact(self.payload, self.envelope)


_DOC_DIGESTS: dict[int, tuple[Any, str]] = {}


def _doc_digest(doc: Any) -> str:
    """digest_json of a registry document, memoized per object (registry data is read-only once loaded)."""
    hit = _DOC_DIGESTS.get(id(doc))
    if hit is not None and hit[0] is doc:
        return hit[1]
    d = digest_json(doc)
    _DOC_DIGESTS[id(doc)] = (doc, d)
    return d


def _epoch(now: float | datetime | None) -> float:
    if now is None:
        return time.time()
    if isinstance(now, datetime):
        return now.timestamp()
    return float(now)


def issue_profile(*, key: SigningKey, run_id: str, wave_id: str, node_id: str, node_execution_id: str,
                  required_capabilities: list[str] | tuple[str, ...], policy_id: str = "default",
                  card: str = "agent_cli", registry: Registry | None = None, ledger: EventLog | None = None,
                  worker_id: str | None = None, worker_public_key: bytes | None = None,
                  audience: str | None = None, ttl_seconds: int | None = None,
                  now: float | datetime | None = None, contract_pins: Mapping[str, str] | None = None,
                  determinism_seed: int | None = None, inputs_hash: str | None = None,
                  jti: str | None = None, egress: Mapping[str, Any] | None = None) -> SignedGrant:
    """Derive, bind, sign and (with a ledger) record a worker's ToolProfile.

    `ttl_seconds` may only shorten the policy TTL. `contract_pins` maps
    tool_id -> "tool_id@<40-hex sha>" when the run pinned registry refs.
    `egress` ({allow_hosts, allow_models, budgets} from an agent's runtime
    card, registry.agent_card.grant_terms) opens the egress gate to those
    hosts and models and adds the token and cost budgets it charges.
    """
    if registry is None:  # the shipped registry: its scopes are the same for every attempt of a run
        reg = default_registry()
        scope = _default_scope(reg, policy_id, card, tuple(required_capabilities))
    else:
        reg = registry
        scope = derive_scope(reg, policy_id=policy_id, card_ref=card, required_capabilities=required_capabilities)
    ttl = scope.ttl_seconds if ttl_seconds is None else max(1, min(int(ttl_seconds), scope.ttl_seconds))
    issued = datetime.fromtimestamp(int(_epoch(now)), tz=timezone.utc)
    pins = dict(contract_pins or {})
    contracts = []
    for t in scope.tool_ids:
        c = {"contract": reg.contracts[t].ref, "tool_id": t, "digest": reg.contracts[t].digest}
        if pins.get(t):
            c["ref"] = pins[t]
        contracts.append(c)
    rank = {"write": 0, "read": 1}
    primary = min(scope.tool_ids, key=lambda t: (rank.get(reg.contracts[t].capability_class, 2), t))
    policy_doc = reg.policy["policies"][policy_id]
    card_doc = reg.card(card)
    issuer = f"coordinator:{key.kid}"
    identity = {"run_id": run_id, "wave_id": wave_id, "node_id": node_id, "node_execution_id": node_execution_id,
                "worker_id": worker_id, "methods": list(scope.allowed_methods), "policy": _doc_digest(policy_doc),
                "contracts": [c["digest"] for c in contracts]}
    profile_id = "tp_" + hashlib.sha256(digest_json(identity).encode()).hexdigest()[:32]
    payload = tp.build_payload(
        profile_id=profile_id, contracts=contracts, primary_contract=reg.contracts[primary].ref,
        policy_version=f"{policy_id}@{reg.policy.get('version', '0.0.0')}",
        policy_ref=f"{policy_id}@{_doc_digest(policy_doc)}",
        card_ref=f"{card_doc['kind']}/{card_doc['card_id']}@{_doc_digest(card_doc)}",
        resolver_ref=f"resolver_spec@{_doc_digest(reg.resolver)}",
        issued_at=issued, ttl_seconds=ttl, jti=jti or secrets.token_hex(16), audience=audience or scope.audience,
        run_id=run_id, wave_id=wave_id, node_id=node_id, node_execution_id=node_execution_id,
        worker_id=worker_id, single_use=scope.single_use, capabilities=list(scope.capabilities),
        allowed_methods=list(scope.allowed_methods), constraints=scope.constraints, budgets=scope.budgets,
        issuer=issuer, cnf_public_key=worker_public_key, determinism_seed=determinism_seed,
        inputs_hash=inputs_hash)
    if egress:
        _apply_egress(payload, egress)
    validate_varying("tool_profile", payload, tp.PER_ATTEMPT_FIELDS)
    envelope, token = tp.sign_body(body := canonical_json(payload), key)  # serialised once: signature, token, digest
    grant = SignedGrant(token=token, envelope=envelope, payload=payload, scope=scope, payload_digest=digest_bytes(body),
                        payload_canonical=body)
    if ledger is not None:
        issued, issued_bytes = issued_payload(grant)
        ledger.append(run_id, ISSUED_TOPIC, issued, wave_id=wave_id, node_id=node_id,
                      node_execution_id=node_execution_id, signer=key, payload_canonical=issued_bytes)
    return grant


def issued_payload(grant: SignedGrant) -> tuple[dict[str, Any], bytes]:
    """The `grant.issued` payload of a grant just issued, and its canonical bytes: the
    profile's bytes are the ones that were signed, spliced in rather than encoded again
    (keys in RFC 8785 order: dropped_methods, payload_digest, profile, token_digest)."""
    token_digest = tp.token_digest(grant.token)
    dropped = dict(grant.scope.dropped)
    payload = {"profile": dict(grant.payload), "payload_digest": grant.payload_digest,
               "token_digest": token_digest, "dropped_methods": dropped}
    body = grant.payload_canonical
    if not body:  # a grant made elsewhere: encoded the general way
        return payload, canonical_json(payload)
    data = b"".join((b'{"dropped_methods":', canonical_json(dropped), b',"payload_digest":',
                     canonical_json(grant.payload_digest), b',"profile":', body, b',"token_digest":',
                     canonical_json(token_digest), b"}"))
    return payload, data


_SCOPES: dict[tuple[Any, ...], tuple[Registry, GrantScope]] = {}


def _default_scope(reg: Registry, policy_id: str, card: str, caps: tuple[str, ...]) -> GrantScope:
    """derive_scope over the shipped registry, remembered by (policy, card, capabilities):
    a pure function of a registry nothing changes once loaded (a refusal is not remembered)."""
    key = (policy_id, card, caps)
    got = _SCOPES.get(key)
    if got is not None and got[0] is reg:
        return got[1]
    scope = derive_scope(reg, policy_id=policy_id, card_ref=card, required_capabilities=caps)
    if len(_SCOPES) >= 256:
        _SCOPES.clear()
    _SCOPES[key] = (reg, scope)
    return scope


def _apply_egress(payload: dict[str, Any], egress: Mapping[str, Any]) -> None:
    net = dict(payload["constraints"].get("network") or {})
    net.update(allow_hosts=sorted(set(egress.get("allow_hosts") or ())),
               allow_models=sorted(set(egress.get("allow_models") or ())), deny_by_default=True)
    payload["constraints"] = {**payload["constraints"], "network": net}
    budgets = dict(payload["budgets"])
    for k in ("max_tokens", "max_model_cost_micros"):
        if k in (egress.get("budgets") or {}):
            budgets[k] = int(egress["budgets"][k])
    payload["budgets"] = budgets


# ---------------------------------------------------------------- verification
