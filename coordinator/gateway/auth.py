"""Grants as the run loop and the gateway use them (the grants area owns them).

Issuance is `coordinator.grants.issue_profile` (policy ∩ resolver ∩ contracts
∩ card, bound to run, wave and node attempt, signed); the run loop records
the `grant.issued` event itself in the dispatch transaction. Verification of
every tool call is `coordinator.grants.GrantVerifier.authorize` (signature,
payload type, audience, run and wave binding, time, jti single use,
revocation, method, budgets; for a sender-constrained grant the per-call
proof from the PROOF_HEADER request header), whose transaction the tool's own events join.
`tools/list` runs the same checks that need no method (signature, payload
type, audience, run binding, time, revocation) and lists the granted tools.
"""
from __future__ import annotations

from typing import Any, Mapping

from registry.canonical import digest_json
from registry.contracts import default_registry
from registry.grant_errors import GrantError

from ..grants import ISSUED_TOPIC, GrantVerifier, SignedGrant, issue_profile, issued_payload

EVIDENCE_CAPABILITY = "write:evidence"  # every attempt may store evidence (logs); the policy adds the lifecycle
CARD = "agent_cli"


def gateway_audience(policy_id: str = "default") -> str:
    return str(default_registry().policy["policies"][policy_id]["audience"])


def grant_capabilities(required: list[str]) -> list[str]:
    caps = list(dict.fromkeys(required))
    if EVIDENCE_CAPABILITY not in caps:
        caps.append(EVIDENCE_CAPABILITY)
    return caps


def issue(*, key: Any, run_id: str, wave_id: str, node_id: str, node_execution_id: str, capabilities: list[str],
          ttl_s: float, policy_id: str, seed: int, inputs_hash: str,
          worker_public_key: bytes | None = None,
          egress: Mapping[str, Any] | None = None) -> tuple[SignedGrant, dict[str, Any]]:
    """(grant, grant.issued payload) for one attempt (see `issue_grant`)."""
    g = issue_grant(key=key, run_id=run_id, wave_id=wave_id, node_id=node_id, node_execution_id=node_execution_id,
                    capabilities=capabilities, ttl_s=ttl_s, policy_id=policy_id, seed=seed, inputs_hash=inputs_hash,
                    worker_public_key=worker_public_key, egress=egress)
    return g, issued_payload(g)[0]


def issue_grant(*, key: Any, run_id: str, wave_id: str, node_id: str, node_execution_id: str,
                capabilities: list[str], ttl_s: float, policy_id: str, seed: int, inputs_hash: str,
                worker_public_key: bytes | None = None, egress: Mapping[str, Any] | None = None) -> SignedGrant:
    """One attempt's grant; its `grant.issued` payload and that payload's bytes are
    `issued_payload(grant)`. With `worker_public_key` the grant is sender-constrained
    (`cnf`): every call must carry a proof signed by the matching private key (PROOF_HEADER)."""
    return issue_profile(key=key, run_id=run_id, wave_id=wave_id, node_id=node_id,
                         node_execution_id=node_execution_id, required_capabilities=grant_capabilities(capabilities),
                         policy_id=policy_id, card=CARD, ttl_seconds=int(ttl_s), determinism_seed=seed,
                         inputs_hash=inputs_hash, worker_public_key=worker_public_key, egress=egress)


def profile_ref(g: SignedGrant) -> str:
    return g.payload_digest or digest_json(dict(g.payload))


def verify_for_listing(verifier: GrantVerifier, token: str, *, run_id: str, audience: str,
                       now: float | None = None) -> Mapping[str, Any]:
    """tools/list: every check that needs no method (GrantVerifier.verify_listing)."""
    return verifier.verify_listing(token, run_id=run_id, audience=audience, now=now)


__all__ = ["GrantError", "GrantVerifier", "ISSUED_TOPIC", "issue", "issue_grant", "issued_payload", "profile_ref", "verify_for_listing",
           "gateway_audience", "grant_capabilities"]
