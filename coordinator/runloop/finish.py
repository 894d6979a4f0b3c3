"""The bridge from the run loop's finish stage to integration (stacking, validation, promotion).

`integration_finish(fc)` hands the run's accepted proposals (one winner per
node) to `coordinator.integration.finish.finish_run` and maps its result onto
the run's final status: promoted, or blocked (missing links named; a run
held at a human gate is blocked until `dome promote --consent`).
"""
from __future__ import annotations

from typing import Any

from .loop import FinishContext


def integration_finish(fc: FinishContext) -> dict[str, Any]:
    from coordinator.integration.finish import FinishContext as IntegrationContext
    from coordinator.integration.finish import finish_run
    from coordinator.integration.policy import IntegrationPolicy

    if not fc.proposals:  # every task succeeded without a patch: nothing to integrate or promote
        from .loop import default_finish
        return default_finish(fc)
    graph = fc.work_queue.graph
    task_meta = {nid: {"risk": n.task.get("risk"), "atomicity": n.task.get("atomicity")}
                 for nid, n in graph.nodes.items()}
    critical = frozenset(nid for nid, d in graph.descendants.items() if d > 0)

    res = finish_run(IntegrationContext(
        run_id=fc.run_id, repo=fc.repo, base_ref=fc.base_ref, proposals=list(fc.proposals), ledger=fc.ledger,
        signing_key=fc.signer, ops_root=fc.ops_root, validations=list(fc.work_queue.validations),
        seed=fc.seed, promote_to=fc.work_queue.promote_to, sandbox=fc.sandbox,
        policy=IntegrationPolicy.load(fc.work_queue.policy), task_meta=task_meta, critical_ids=critical))
    status = res.status if res.status in ("promoted", "failed") else "blocked"
    promotion = res.promotion or {}
    return {"status": status, "head": res.head_ref, "promoted_ref": promotion.get("to_ref") if status == "promoted" else None,
            "included_proposals": res.included, "missing": res.missing,
            "awaiting_consent": res.consent_token is not None,
            "consent_token_file": (str(fc.ops_root / "runs" / fc.run_id / "gate" / "consent.token")
                                   if res.consent_token else None),
            "reason": _reason(status, res.error), **({"error": res.error} if res.error else {})}


def _reason(status: str, error: dict[str, Any] | None) -> str | None:
    if status == "promoted":
        return None
    if error is not None:  # the decision said promote, the ref did not move: never recorded as promoted
        return f"{error.get('code')}: {error.get('message')}"
    return "evidence chain incomplete or human gate"
