"""The bridge from the run loop's finish stage to integration (stacking, validation, promotion).

`integration_finish(fc)` hands the run's accepted proposals (one winner per
node) to `coordinator.integration.finish.finish_run` and maps its result onto
the run's final status: promoted, or blocked (missing links named; a run
held at a human gate is blocked until `dome promote --consent`).
"""
from __future__ import annotations

from typing import Any

from .loop import FinishedRun


def integration_finish(fc: FinishedRun) -> dict[str, Any]:
    from coordinator.integration.finish import FinishContext
    from coordinator.integration.finish import finish_run
    from coordinator.integration.policy import IntegrationPolicy

    if not fc.proposals:  # every task succeeded without a patch: nothing to integrate or promote
        from .loop import default_finish
        return default_finish(fc)
    graph = fc.work_queue.graph
    task_meta = {nid: {"risk": n.task.get("risk"), "atomicity": n.task.get("atomicity")}
                 for nid, n in graph.nodes.items()}
    critical = frozenset(nid for nid, d in graph.descendants.items() if d > 0)

    res = finish_run(FinishContext(
        run_id=fc.run_id, repo=fc.repo, base_ref=fc.base_ref, proposals=list(fc.proposals), ledger=fc.ledger,
        signing_key=fc.signer, ops_root=fc.ops_root, validations=list(fc.work_queue.validations),
        seed=fc.seed, promote_to=fc.work_queue.promote_to, sandbox=fc.sandbox,
        policy=IntegrationPolicy.load(fc.work_queue.policy), task_meta=task_meta, critical_ids=critical))
    status = "promoted" if res.status == "promoted" else "blocked"
    promotion = res.promotion or {}
    return {"status": status, "head": res.head_ref, "promoted_ref": promotion.get("to_ref") if status == "promoted" else None,
            "included_proposals": res.included, "missing": res.missing,
            "awaiting_consent": res.consent_token is not None,
            "consent_token_file": (str(fc.ops_root / "runs" / fc.run_id / "gate" / "consent.token")
                                   if res.consent_token else None),
            "reason": None if status == "promoted" else "evidence chain incomplete or human gate"}
