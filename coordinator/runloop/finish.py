"""The bridge from the run loop's finish stage to integration (stacking, validation, promotion).

`integration_finish(fc)` hands the run's accepted proposals (one winner per
node) to `coordinator.integration.finish.finish_run` and maps its result onto
the run's final status: promoted, or blocked (missing links named; a run
held at a human gate is blocked until `dome promote --consent`). A partial run (`if_tasks_fail: promote_rest`,
see `partial.py`) hands over only the succeeded tasks' proposals, and the
tasks not landed are recorded with integration's inputs for the gate to name.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from .contracts import FinishedRun, default_finish


def bound_proposals(fc: FinishedRun) -> list[dict[str, Any]]:
    """The accepted proposals, each bound to the attempt that submitted it."""
    return bind_proposals(fc.proposals, fc.state, fc.run_id)


def bind_proposals(proposals: Any, state: Any, run_id: str) -> list[dict[str, Any]]:
    """Each proposal bound to the attempt that submitted it: the run, wave,
    node and attempt come from the dispatch the coordinator recorded for its
    node_execution_id (the grant), not from the proposal."""
    from coordinator.integration.binding import bind
    out = []
    for p in proposals:
        neid = p.get("node_execution_id")
        ex = state.executions.get(neid, {}) if isinstance(neid, str) else {}
        grant = {"run_id": run_id, "wave_id": ex.get("wave_id"), "node_id": ex.get("node_id"),
                 "node_execution_id": neid, "attempt": ex.get("attempt")}
        inner = p.get("proposal")
        out.append({**p, "proposal": bind(inner, grant)} if isinstance(inner, Mapping) else dict(p))
    return out


def repo_policy(fc: FinishedRun) -> Any:
    return repo_policy_for(fc.work_queue, fc.repo, fc.base_ref)


def repo_policy_for(wq: Any, repo: Any, base_ref: str) -> Any:
    """The queue's policy plus the protected paths the repository lists in
    `.dome/protected-paths` at the run's base commit."""
    from coordinator.integration import gitio
    from coordinator.integration.policy import (REPO_PROTECTED_FILE, IntegrationPolicy, fitted_to_queue,
                                                parse_protected_file)
    from coordinator.integration.validation_inputs import provided_suites
    declared = {n.risk_level for n in wq.graph.nodes.values()} if hasattr(wq, "graph") else ()
    policy = fitted_to_queue(IntegrationPolicy.load(wq.policy, domain=getattr(wq, "domain", None)),
                             provided_suites(getattr(wq, "validations", ())), declared)
    proc = gitio.git(repo, "show", f"{base_ref}:{REPO_PROTECTED_FILE}", check=False)
    if proc.returncode == 0:
        policy = policy.with_protected(parse_protected_file(proc.stdout.decode("utf-8", "replace")))
    if getattr(wq, "human_gate_reasons", ()):  # the run's starter asked for a person whatever the risk
        policy = policy.with_human_gate_always()
    return policy


def task_meta_of(graph: Any) -> tuple[dict[str, dict[str, Any]], frozenset[str]]:
    """Each task's risk and atomicity (from the work queue) and the critical path (nodes with dependents)."""
    task_meta = {nid: {"risk": n.task.get("risk"), "atomicity": n.task.get("atomicity")}
                 for nid, n in graph.nodes.items()}
    return task_meta, frozenset(nid for nid, d in graph.descendants.items() if d > 0)


def integration_finish(fc: FinishedRun) -> dict[str, Any]:
    from coordinator.integration.finish import FinishContext
    from coordinator.integration.finish import finish_run
    if not fc.proposals:  # every task succeeded without a patch: nothing to integrate or promote
        return default_finish(fc)
    if fc.canvas is not None:  # integrated during the run: the driver completes what is left
        return fc.canvas.finish(fc)
    task_meta, critical = task_meta_of(fc.work_queue.graph)

    # fc.ledger writes through the run's LedgerWriter, which already shows the
    # live view every record integration appends; the view also hears when each
    # validation suite starts (its report follows as a record).
    from coordinator.integration.validation import SuiteRunner
    ledger = fc.ledger

    def runner() -> Any:
        return SuiteRunner(fc.repo, sandbox=fc.sandbox, put_artifact=fc.ledger.blobs.put, tool_dirs=fc.tool_dirs)
    # without a view and tool folders, finish_run builds its own runner when a suite is due
    validator = AnnouncedValidator(runner, fc.view) if fc.view is not None else (runner() if fc.tool_dirs else None)
    res = finish_run(FinishContext(
        run_id=fc.run_id, repo=fc.repo, base_ref=fc.base_ref, proposals=bound_proposals(fc), ledger=ledger,
        validator=validator,
        signing_key=fc.signer, ops_root=fc.ops_root, validations=list(fc.work_queue.validations),
        seed=fc.seed, promote_to=fc.work_queue.promote_to, sandbox=fc.sandbox,
        policy=repo_policy(fc), task_meta=task_meta, critical_ids=critical,
        tasks_not_landed=fc.partial.not_landed_rows()))
    return outcome_of(fc, res)


def outcome_of(fc: FinishedRun, res: Any) -> dict[str, Any]:
    """The run's final status from integration's FinishResult."""
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


class AnnouncedValidator:
    """A validator that tells the live view which suite starts on which
    checkpoint; its report (with the phase) follows as a ledger record."""

    def __init__(self, make: Callable[[], Any], view: Any) -> None:
        self.make, self.view, self.inner = make, view, None
        self.newest = -1  # the newest checkpoint validated: the head of the stack

    def __call__(self, cp: Any, suite: Mapping[str, Any]) -> dict[str, Any]:
        from coordinator.integration.validation import suite_name
        if self.inner is None:  # built on first use, as finish_run would (it may need a sandbox)
            self.inner = self.make()
        # the whole stack is validated on its head; a bisect step checks an older prefix
        phase = "final" if cp.index >= self.newest else "bisect step"
        self.newest = max(self.newest, cp.index)
        self.view.on_step(f"validating {suite_name(suite)} ({phase}) on {cp.checkpoint_id} "
                          f"({len(cp.included)} proposal(s))")
        return self.inner(cp, suite)
