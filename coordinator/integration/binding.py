"""A proposal belongs to the grant that submitted it (pure).

A worker writes its proposal, so every claim in it about who made it (run,
wave, node, node execution, attempt) is the worker's word. The coordinator
knows the truth from the grant the call was authorized with; a claim that
disagrees is refused (PROPOSAL_BINDING_MISMATCH), and the bound copy carries
the grant's values, so nothing downstream (task risk, atomicity, the gate)
can be steered by naming another node.
"""
from __future__ import annotations

from typing import Any, Mapping

from registry.errors import DomeError

BOUND_FIELDS = ("run_id", "wave_id", "node_id", "node_execution_id", "attempt")


class ProposalBindingMismatch(DomeError):
    code = "PROPOSAL_BINDING_MISMATCH"


def binding_mismatches(proposal: Mapping[str, Any], grant: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every claim of `proposal` (top level and `worker_run_meta`) that
    disagrees with `grant` ({run_id, wave_id, node_id, node_execution_id,
    attempt}; a key the grant lacks is not judged)."""
    out = []
    meta = proposal.get("worker_run_meta")
    places = [("", proposal), ("worker_run_meta.", meta if isinstance(meta, Mapping) else {})]
    for prefix, where in places:
        for key in BOUND_FIELDS:
            if key in where and grant.get(key) is not None and str(where[key]) != str(grant[key]):
                out.append({"field": prefix + key, "claimed": where[key], "grant": grant[key]})
    return out


def check_binding(proposal: Mapping[str, Any], grant: Mapping[str, Any]) -> None:
    """Raise ProposalBindingMismatch when the proposal claims another attempt."""
    bad = binding_mismatches(proposal, grant)
    if bad:
        raise ProposalBindingMismatch(
            "the proposal claims another run, wave, node or attempt than its grant",
            details={"mismatches": bad},
            hints=["a worker submits proposals only for the attempt its grant names"])


def bind(proposal: Mapping[str, Any], grant: Mapping[str, Any]) -> dict[str, Any]:
    """A copy carrying the grant's values; disagreeing claims are kept under
    `binding_mismatches` so the proposal checks refuse it."""
    bad = binding_mismatches(proposal, grant)
    out = {k: v for k, v in proposal.items() if k not in COORDINATOR_FIELDS}  # the worker's word on them is void
    out.update({k: v for k, v in grant.items() if k in BOUND_FIELDS and v is not None})
    if bad:
        out["binding_mismatches"] = bad
    return out


# -- provenance: fields only the coordinator writes ------------------------------------------

COORDINATOR_FIELDS = ("resolves", "binding_mismatches", "_requires")
"""PatchProposal fields that record provenance or the coordinator's own findings: `resolves`
(the conflict a resolver attempt resolves, set by the run loop from its `resolver.spawned`
record), `binding_mismatches` (set by `bind`) and `_requires` (the proposals a derived base
holds, set by the integration stage from `task.base_derived`). A worker's word on them counts
for nothing."""


class ProposalProvenanceForged(DomeError):
    code = "PROPOSAL_PROVENANCE_FORGED"


def forged_provenance(proposal: Mapping[str, Any], spawn: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The coordinator-owned fields a worker's proposal carries without right. `spawn` is the
    `resolver.spawned` record of the submitting attempt (None when it is not a resolver): a
    `resolves` that names exactly that spawn's proposal and origin is what the coordinator
    would write itself, and is let through; anything else is forged."""
    out = []
    for key in COORDINATOR_FIELDS:
        if key not in proposal:
            continue
        claim = proposal[key]
        if key == "resolves" and spawn is not None and isinstance(claim, Mapping) and \
                claim.get("proposal_id") == spawn.get("proposal_id") and \
                claim.get("origin_proposal_id", spawn.get("origin")) == spawn.get("origin"):
            continue
        out.append({"field": key, "claimed": claim})
    return out


def check_provenance(proposal: Mapping[str, Any], spawn: Mapping[str, Any] | None) -> None:
    """Raise ProposalProvenanceForged when a worker's proposal writes a coordinator-owned field."""
    bad = forged_provenance(proposal, spawn)
    if bad:
        raise ProposalProvenanceForged(
            "the proposal sets fields only the coordinator writes",
            details={"fields": [b["field"] for b in bad], "claims": bad,
                     "resolver_spawn": dict(spawn) if spawn is not None else None},
            hints=["leave `resolves` out: the coordinator records it for the resolver attempts it spawns"])
