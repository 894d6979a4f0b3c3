"""In-run integration: the canvas moves while the workers work.

With `scheduling.integrate_during_run`, the run loop hands each batch of
accepted proposals (`integration.batch`, the ids in it) to a `CanvasDriver`
as they arrive. The driver verifies, plans and stacks the batch on one
canvas that lives for the whole run, and validates the stack (speculative,
bisect and eject on failure), exactly as the finish stage does for a whole
run. The finish stage then integrates what is left, records the final plan
revision and goes to the gate.

Every step goes through the integration `Emitter`. A resumed coordinator
re-walks the recorded batches in order on a fresh canvas: each step whose
record is already in the ledger is adopted (nothing recorded twice; the
checkpoint commits are deterministic, so they are the same objects), and
the first step not found carries on for real.

A queue whose tasks ask for reruns (`on_conflict: rerun`) gets a driver even
without `integrate_during_run`: a finish-stage driver that integrates nothing
while tasks run, then stacks every accepted proposal in one batch once the
task graph is done (the finish stage), spawns the reruns that batch asks for
on its head, stacks what they propose, and only then goes to the gate.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping, Sequence

from coordinator.integration.canvas import Canvas
from coordinator.integration.evidence import T_PLAN, T_SELECTION
from coordinator.integration.finish import (T_BASE_DERIVED, FinishContext, export_promotion,
                                            finish_recorded_promotion, gate_and_promote, record_inputs,
                                            record_verified_proposals, recorded_result, suites_for,
                                            validation_inputs)
from coordinator.integration.recorder import Emitter, RunRecords, records_of, run_dir
from coordinator.integration.planning import Candidate, final_plan, plan_stack
from coordinator.integration.stacking import Stacker
from coordinator.integration.validation import SuiteRunner, suite_name
from registry.signing import Keyring

from ..scheduler import statuses
from . import resolver as rv
from .partial import decide
from .contracts import SIGNED_TOPICS
from .finish import AnnouncedValidator, bind_proposals, outcome_of, repo_policy_for, task_meta_of
from .baseline import T_BATCH, CanvasFacts, CanvasPolicy, advance_to, batch_due, fold_canvas, fold_events


@dataclasses.dataclass
class ResolverNode:
    """A resolver task: not in the graph; shaped like a graph node for dispatch."""
    task: dict[str, Any]
    action_spec: dict[str, Any]
    timeout_s: float
    task_spec_digest: str
    dependencies: tuple[str, ...] = ()


class CanvasDriver:
    """One run's canvas during the run (the run loop owns it; one thread)."""

    def __init__(self, loop: Any, policy: CanvasPolicy) -> None:

        self.loop = loop
        self.policy = policy
        self.run_id, self.repo, self.base_ref = loop.run_id, Path(loop.repo), loop.base_sha
        self.wq = loop.wq
        self.ipolicy = repo_policy_for(self.wq, self.repo, self.base_ref)
        meta, self.critical = task_meta_of(self.wq.graph)
        # the queue's resolver tries hold with in-run integration only; a task's on_conflict always
        self.limits = rv.TryLimits.of(self.wq.graph, policy.resolver_max_tries if policy.during_run else 0)
        self.task_meta = rv.with_resolver_nodes(meta, self.limits.most)
        events = loop.ctx.ledger.events(self.run_id)
        self.facts: CanvasFacts = fold_events(events)
        self.rfacts: rv.ResolverFacts = rv.fold_resolver_events(events)
        self.canvas: Canvas | None = None
        self.stacker: Stacker | None = None
        self.emit: Emitter | None = None
        self.scan: RunRecords | None = None  # the run's integration and derived-base records, read as they come
        self.plans: list[Any] = []  # each batch's plan, in order
        self.rejected: list[tuple[str, Any]] = []
        self.checked: dict[str, Any] = {}
        self.batches = 0
        self.validated_at: tuple[str, ...] | None = None  # the stack (included ids) last validated
        self.validator: Any = None

    # -- the ledger ------------------------------------------------------------
    @property
    def ledger(self) -> Any:
        """The run's writer: it applies each record to the run state and shows it
        in the live view (once; a second observer printed every decision twice)."""
        from .writer import WriterLedger
        return WriterLedger(self.loop.writer)

    def on_record(self, rec: Any) -> None:
        self.facts = fold_canvas(self.facts, rec.topic, rec.payload or {})
        self.rfacts = rv.fold_resolvers(self.rfacts, rec.topic, rec.payload or {},
                                        getattr(rec, "node_execution_id", None), getattr(rec, "node_id", None))

    def _context(self, proposals: Sequence[Mapping[str, Any]],
                 pool: Sequence[Mapping[str, Any]] | None = None) -> FinishContext:
        return FinishContext(
            run_id=self.run_id, repo=self.repo, base_ref=self.base_ref, proposals=list(proposals),
            ledger=self.ledger, signing_key=self.loop.ctx.signer, ops_root=Path(self.loop.ctx.ops_root),
            validations=list(self.wq.validations), policy=self.ipolicy, seed=self.loop.seed,
            promote_to=self.wq.promote_to, sandbox=self.loop.ctx.sandbox, task_meta=self.task_meta,
            critical_ids=self.critical, wave_bases=self.integration_bases(),
            resolver_hook=self if self.limits.most > 0 else None, derivation_pool=pool)

    def integration_bases(self) -> frozenset[str]:
        """Wave bases that are integration heads of this run (a proposal may start there)."""
        return frozenset(c for c in self.facts.trees if c != self.base_ref)

    # -- opening and resuming ---------------------------------------------------
    def _open(self) -> None:
        if self.canvas is not None:
            return
        ctx = self._context([])
        self.scan = RunRecords(self.loop.ctx.ledger, self.run_id, also=frozenset({T_BASE_DERIVED}))
        self.emit = Emitter(ctx.ledger, self.run_id, ctx.signing_key, ctx.clock, replay=self.scan.integration)
        record_inputs(ctx, self.emit, self.ipolicy, self.wq.promote_to or self.ipolicy.promote_to)
        self.canvas = Canvas(self.repo, self.base_ref, run_id=self.run_id,
                             workdir=run_dir(ctx.ops_root, self.run_id) / "canvas",
                             max_binary_bytes=self.ipolicy.max_binary_bytes, policy=self.ipolicy)

    def restore(self) -> None:
        """After a restart: walk the batches the ledger holds again (their steps are adopted)."""
        if recorded_result(self.loop.ctx.ledger, self.run_id) is not None:
            return
        units = [r for r in records_of(self.loop.ctx.ledger, self.run_id) if r.topic in (T_BATCH, rv.T_EXHAUSTED)]
        if not units:
            return
        events = self.loop.ctx.ledger.events(self.run_id)
        by_id = {str(p.get("proposal_id")): p for p in self._accepted()}
        for u in units:  # each step decided on what the ledger held then
            self.rfacts = rv.fold_resolver_events([e for e in events if e.sequence < u.sequence])
            if u.topic == T_BATCH:
                self.integrate([by_id[i] for i in u.artifact.get("proposal_ids", []) if i in by_id])
            else:
                self._exhaust(str(u.artifact["proposal_id"]), int(u.artifact.get("tries", 0)))
        # what the ledger holds now (the walk may have recorded the steps a kill cut short)
        self.rfacts = rv.fold_resolver_events(self.loop.ctx.ledger.events(self.run_id))

    # -- batches -----------------------------------------------------------------
    def _accepted(self) -> list[dict[str, Any]]:
        """The winners' proposals and those of resolver attempts that succeeded (with their provenance)."""
        st = self.loop.writer.state
        done = {n: a for n, a in self.rfacts.attempts.items() if a.ended == "succeeded"}
        extra = [p for p in st.proposals if p.get("node_execution_id") in done]
        out = bind_proposals(self.loop._accepted_proposals() + extra, st, self.run_id)
        for p in out:
            att = done.get(p.get("node_execution_id"))
            if att is not None and isinstance(p.get("proposal"), Mapping):
                req = self.rfacts.requests.get(att.request, {})
                p["proposal"] = {**p["proposal"], "resolves": {
                    "proposal_id": req.get("proposal_id"), "origin_proposal_id": att.origin,
                    "conflict_decision": self.rfacts.decisions.get(str(req.get("conflict_fingerprint"))),
                    "conflict_fingerprint": req.get("conflict_fingerprint"), "try": att.try_no}}
        return out

    def waiting(self) -> list[dict[str, Any]]:
        return [p for p in self._accepted() if str(p.get("proposal_id")) not in self.facts.batched]

    def tick(self) -> bool:
        """Integrate a batch if one is due, then start the resolvers it asked for; True when it did anything."""
        did = False
        waiting = self.waiting()
        if self._due(waiting):
            self.integrate(waiting)
            did = True
        if self.limits.most > 0:
            for origin_id, tries in rv.exhausted_now(self.rfacts, self.limits):
                self._exhaust(origin_id, tries)
                did = True
            for origin_id, req, try_no in rv.to_spawn(self.rfacts, self.limits):
                self._spawn_resolver(origin_id, req, try_no)
                did = True
        return did

    def _due(self, waiting: Sequence[Mapping[str, Any]]) -> bool:
        if self.policy.during_run:
            return batch_due(len(waiting), len(self.loop.live), self.policy.batch_size)
        # the finish stage: every task settled, nothing running, and the run integrates at all
        return bool(waiting) and not self.loop.live and self._tasks_done() and self._integrates()

    def _tasks_done(self) -> bool:
        with self.loop.writer.lock:
            self.loop.ready.refresh(self.loop.writer.state)
            return bool(self.loop.ready.done())

    def _integrates(self) -> bool:
        """Will the finish stage integrate (tasks failed and the queue promotes nothing then)?"""
        try:
            return decide(statuses(self.loop.graph, self.loop.writer.state), self.wq.if_tasks_fail).integrate
        except ValueError:  # a task not settled yet: not the finish stage
            return False

    def busy(self) -> bool:
        """Is there integration work the run must not finish without?"""
        if self.waiting() and (self.policy.during_run or self._integrates()):
            return True
        return self.limits.most > 0 and bool(rv.to_spawn(self.rfacts, self.limits)
                                             or rv.exhausted_now(self.rfacts, self.limits))

    # -- resolvers ---------------------------------------------------------------
    def available(self, proposal_id: str) -> bool:
        """Stacker hook: may this conflict go to a resolver worker?"""
        return rv.available(self.rfacts, proposal_id, self.limits)

    def why_not(self, proposal_id: str) -> str | None:
        o = rv.origin(self.rfacts, proposal_id)
        used = rv.tries_used(self.rfacts, o)
        if not used:
            return None
        if self.limits.reruns(self.rfacts.node_of.get(o)):
            return f"rerun tried {used} time(s), the task's rerun_max_tries"
        return f"resolver tried {used} time(s), the most policy allows"

    def how(self, proposal_id: str) -> str | None:
        """Stacker hook: the conflict decision's reason when the task asked for reruns itself."""
        o = rv.origin(self.rfacts, proposal_id)
        node = self.rfacts.node_of.get(o)
        if not self.limits.reruns(node):
            return None
        return (f"rerun {rv.original_node(str(node))}'s command on the current head (on_conflict: rerun, "
                f"try {rv.tries_used(self.rfacts, o) + 1} of {self.limits.for_node(node)})")

    def __call__(self, request: Mapping[str, Any]) -> None:
        """Stacker hook: the request is in the ledger (integration.resolver_request); tick() spawns."""

    def _exhaust(self, origin_id: str, tries: int) -> None:
        self._open()
        assert self.emit is not None
        reason = rv.exhausted_reason(self.rfacts, origin_id, tries, self.limits)
        self.emit(rv.T_EXHAUSTED, {"artifact_kind": "dome.resolver_exhausted/v1", "proposal_id": origin_id,
                                   "object_id": f"resolver-exhausted:{origin_id}", "tries": tries,
                                   "reason": reason})
        if self.stacker is not None:
            self.stacker.state.why_blocked[origin_id] = {"state": "dropped", "reason": reason}

    def _spawn_resolver(self, origin_id: str, req: Mapping[str, Any], try_no: int) -> None:
        """A resolver attempt on the current integration head, recorded with its grant and dispatch."""
        assert self.canvas is not None
        src = self.checked.get(str(req["proposal_id"]).split(":split-")[0]) or self.checked.get(origin_id)
        node_id = rv.original_node(str((src.proposal if src else {}).get("node_id") or ""))
        orig = self.loop.node(node_id)
        head, tree = self.canvas.publish_head(), self.canvas.head_tree
        self.loop.ensure_commit(head)
        inp = rv.resolver_input(req, origin_id=origin_id,
                                decision_id=self.rfacts.decisions.get(str(req.get("conflict_fingerprint"))),
                                diff=src.canonical.decode("utf-8", "surrogateescape") if src else "",
                                intent={"node_id": node_id, "action_spec": dict(orig.action_spec)},
                                head_ref=head, try_no=try_no)
        nid = rv.resolver_node_id(node_id, try_no)
        action = rv.resolver_action(orig.action_spec, inp)
        task = {**orig.task, "node_id": nid, "action_spec": action, "dependencies": []}
        self.loop.extra_nodes[nid] = ResolverNode(task, action, orig.timeout_s,
                                                  rv.task_spec_digest(orig.task_spec_digest, inp))
        wave_id = f"w{max(1, self.loop.writer.state.waves):04d}"
        drafts, launch = self.loop.draft_attempt(nid, wave_id, try_no, "resolver", (head, tree))
        keys = {"node_id": nid, "node_execution_id": launch[1], "wave_id": wave_id, "task_id": nid}
        spawned = {"node_execution_id": launch[1], "node_id": nid, "origin": origin_id,
                   "request": rv.request_key(req), "try": try_no, "proposal_id": req["proposal_id"],
                   "conflict_decision": inp["conflict_decision"],
                   "conflict_fingerprint": req.get("conflict_fingerprint"),
                   "base_ref": head, "base_tree_hash": tree, "base_source": "integration_head"}
        if self.limits.reruns(node_id):  # the task asked for it: say so, and its bound
            spawned.update({"on_conflict": "rerun", "max_tries": self.limits.for_node(node_id)})
        self.loop.writer.append_many([(rv.T_SPAWNED, spawned, keys), *drafts],
                                     signed=SIGNED_TOPICS | {rv.T_SPAWNED})
        self.loop.launch([launch])

    def integrate(self, proposals: Sequence[Mapping[str, Any]]) -> None:
        """One batch: verify, plan, stack on the head, validate the stack."""
        self._open()
        assert self.emit is not None and self.canvas is not None
        self.batches += 1
        ids = sorted(str(p.get("proposal_id")) for p in proposals)
        self.emit(T_BATCH, {"artifact_kind": "dome.integration_batch/v1", "batch": self.batches,
                            "object_id": f"batch-{self.batches}", "proposal_ids": ids,
                            "head_ref": self.canvas.head})
        try:
            self._integrate(proposals)
        finally:
            self.emit.flush()  # the per-proposal records the emitter holds (the steps happened)

    def _integrate(self, proposals: Sequence[Mapping[str, Any]]) -> None:
        assert self.emit is not None and self.canvas is not None
        # a derived base may name an ancestor's proposal integrated in an earlier batch
        ctx = self._context(proposals, pool=self._accepted())
        reader = self.canvas.reader
        assert self.scan is not None
        self.scan.refresh()  # the derived bases recorded since the last batch (the events since, not the run)
        checked, rejected = record_verified_proposals(ctx, self.emit, self.ipolicy, reader,
                                                      derived_records=self.scan.other)
        self.rejected.extend(rejected)
        cands = [Candidate.from_proposal(c.proposal, c.fingerprints, list(c.touched), self.ipolicy,
                                         self.critical) for c in checked.values()]
        plan, index = plan_stack(cands, base_ref=self.base_ref, seed=self.loop.seed, policy=self.ipolicy,
                                 rejected=rejected, run_id=self.run_id, created_at=ctx.clock(),
                                 revision=self.batches, stacked=frozenset(self.canvas.included))
        self.plans.append(plan)
        self.emit(T_PLAN, plan.to_dict())
        self.emit(T_SELECTION, plan.selection_decision())
        self.checked.update(checked)
        requires = {pid: tuple(c.proposal.get("_requires", ())) for pid, c in checked.items()}
        if self.stacker is None:
            self.stacker = Stacker(self.canvas, checked, plan, index, self.ipolicy, emit=self.emit,
                                   requires=requires, resolver_hook=ctx.resolver_hook,
                                   base_inputs=validation_inputs(ctx, self.ipolicy))
        else:
            self.stacker.extend(checked, plan, index, requires)
        self.stacker.run()
        self._validate()
        self._mark_resolved(checked)

    def _mark_resolved(self, checked: Mapping[str, Any]) -> None:
        """An original proposal whose resolver's proposal is on the head is resolved, not dropped."""
        assert self.stacker is not None and self.canvas is not None
        for pid, c in checked.items():
            res = c.proposal.get("resolves")
            if isinstance(res, Mapping) and pid in self.canvas.included:
                self.stacker.state.why_blocked[str(res.get("origin_proposal_id"))] = {
                    "state": "resolved", "by": pid, "conflict_decision": res.get("conflict_decision")}

    def _suites(self) -> list[dict[str, Any]]:
        assert self.stacker is not None
        state = self.stacker.state
        risks = {self.checked[l.proposal_id.split(":split-")[0]].risk for l in state.layers}
        return suites_for(self.wq.validations, self.ipolicy, risks, bool(state.derived))

    def _validate(self) -> None:
        assert self.stacker is not None and self.canvas is not None
        suites = self._suites()
        now = tuple(self.canvas.included)
        if not self.stacker.state.layers or not suites or now == self.validated_at:
            return
        if self.validator is None:
            if self.loop.ctx.view is not None:
                self.validator = AnnouncedValidator(lambda: SuiteRunner(
                    self.repo, sandbox=self.loop.ctx.sandbox, put_artifact=self.loop.ctx.ledger.blobs.put,
                    tool_dirs=self.loop.tool_dirs), self.loop.ctx.view)
            else:
                self.validator = SuiteRunner(self.repo, sandbox=self.loop.ctx.sandbox,
                                             put_artifact=self.loop.ctx.ledger.blobs.put,
                                             tool_dirs=self.loop.tool_dirs)
        self.stacker.validate(suites, self.validator)
        self.validated_at = tuple(self.canvas.included)

    # -- the wave baseline -------------------------------------------------------
    def wave_base(self, _loop: Any = None) -> tuple[str, str] | None:
        """The base of the next wave: the integration head when the policy says so, else the current one."""
        moved = advance_to(self.facts, self.policy)
        if moved is not None:
            self.canvas and self.canvas.flush_refs()  # workers fetch the head from the repository
            return moved
        wb = self.facts.wave_base
        return (wb, self.facts.trees[wb]) if wb in self.facts.trees else None

    # -- the finish stage --------------------------------------------------------
    def finish(self, fc: Any) -> dict[str, Any]:
        """Integrate what is left, record the final plan, gate and promote."""
        done = recorded_result(self.loop.ctx.ledger, self.run_id)
        if done is not None:
            if done.promotion is not None:
                export_promotion(records_of(self.loop.ctx.ledger, self.run_id), done.promotion,
                                 self.loop.ctx.signer, Path(self.loop.ctx.ops_root), self.run_id)
            return outcome_of(fc, finish_recorded_promotion(self.repo, done))
        left = self.waiting()
        if left or self.canvas is None:
            self.integrate(left)
        assert self.stacker is not None and self.canvas is not None and self.emit is not None
        self._validate()
        state = self.stacker.state
        for origin_id in rv.settled_without_change(self.rfacts):
            state.why_blocked[origin_id] = {"state": "resolved", "by": None,
                                            "reason": "its resolver found nothing left to do on the head"}
        included = list(self.canvas.included)
        digests = {l.proposal_id: l.diff_digest for l in state.layers}
        atom = {pid: str(c.proposal.get("atomicity", "atomic_proposal")) for pid, c in self.checked.items()}
        not_applied = {pid: why for pid, why in state.why_blocked.items()
                       if why.get("state") != "applied" and pid not in included}
        every_rejected = tuple(r for p in self.plans for r in p.rejected)
        last = dataclasses.replace(self.plans[-1], rejected=every_rejected)
        fplan = final_plan(last, included=included, digests=digests, atomicity=atom, not_applied=not_applied,
                           expected_validations=[suite_name(s) for s in self._suites()], run_id=self.run_id)
        self.emit(T_PLAN, fplan.to_dict())
        self.canvas.publish_head()
        self.close()  # the worktree goes before the gate: a kill from here on leaves none behind
        key = self.loop.ctx.signer
        res = gate_and_promote(self.ledger, self.run_id, repo=self.repo, key=key,
                               keyring=Keyring({key.kid: key.public}), policy=self.ipolicy,
                               to_ref=self.wq.promote_to or self.ipolicy.promote_to,
                               ops_root=Path(self.loop.ctx.ops_root), emit=self.emit,
                               why=dict(state.why_blocked),
                               rejected=[{"proposal_id": p, **r.to_dict()} for p, r in self.rejected],
                               base_ref=self.base_ref, tasks_not_landed=fc.partial.not_landed_rows(),
                               records=self.scan.refresh() if self.scan is not None else None)
        return outcome_of(fc, res)

    def close(self) -> None:
        if self.canvas is not None:
            self.canvas.close()
            self.canvas = None


def driver_for(loop: Any) -> CanvasDriver | None:
    """The loop's canvas driver when the run has a finish stage and the queue integrates during the
    run or has a task that asks for reruns (`on_conflict: rerun`); None keeps the one-pass finish."""
    policy = CanvasPolicy.from_scheduling(loop.wq.scheduling)
    if loop.ctx.finish is None:
        return None
    if policy.during_run or rv.TryLimits.of(loop.wq.graph, 0).most > 0:  # reruns need one in the finish stage
        return CanvasDriver(loop, policy)
    return None


__all__ = ["CanvasDriver", "driver_for"]

