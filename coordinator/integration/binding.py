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
    out = dict(proposal)
    out.update({k: v for k, v in grant.items() if k in BOUND_FIELDS and v is not None})
    if bad:
        out["binding_mismatches"] = bad
    return out
