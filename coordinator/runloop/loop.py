"""The run loop (imperative shell): waves of sandboxed workers, gateway, resume.

    loop = RunLoop.start(queue_path, ctx)      # or RunLoop.resume(run_id, ctx)
    outcome = loop.run()                        # RunOutcome(run_id, status, ...)

Every decision is a ledger event appended through the LedgerWriter, and the
scheduler reads only the state folded from those events, so a killed
coordinator resumes exactly: attempts that were in flight are recorded
`task.lost` (their grants revoked) and scheduled again with fresh
node_execution_ids and grants; finished work is never redone.

The `finish` stage is pluggable: `finish(FinishedRun) -> dict` gets the
run's accepted proposals (one winner per node) and returns at least
`{"status": ...}` (plus `head`, `promoted_ref`); the integration area plugs
stacking, validation and promotion in here. The default ends the run
`completed` (every node succeeded) or `failed`.

With `scheduling.integrate_during_run` the loop also owns a canvas driver
(`canvas_driver.py`): accepted proposals are stacked in batches as they
arrive, new waves may start from the integration head (`baseline.py`), and
the finish stage completes what is left.

One attempt's life (base, SpawnSpec, grant, launch, supervision) is in
`attempts.py`, which RunLoop inherits.
"""
from __future__ import annotations

import gc
import json
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from registry.canonical import digest_json

from .. import runstate as rs
from ..executors.attempts import make_run_dir, sweep_attempt_dirs
from ..executors.base import Limits
from ..grants import CALL_TOPIC, GrantVerifier
from ..gateway.dispatch import ToolDispatcher
from ..gateway.server import WorkerGateway
from ..gateway.worker_tools import GatewayBackend, build_tools
from ..runstate import RunState, fold
from ..ready_set import ReadySet
from ..scheduler import RETRY_BUDGET_EXHAUSTED, SchedulerPolicy, decide, statuses, stranded
from ..preflight import Prepared, prepare
from ..workqueue import WorkQueue, parse_work_queue
from .derived_base import DerivedBase
from .snapshot import write_snapshot
from .contracts import SIGNED_TOPICS, FinishedRun, RunContext, RunOutcome, default_finish, make_run_executor
from .manifest import (RunError, RunNotFound, environment, host_container_ref,
                       new_run_id, node_seed, registry_ref, utc_stamp)
from .lease import LeaseKeeper
from ..run_payloads import offload_finish_lists
from .attempts import AttemptLifecycle, Live
from .recovery import record_lost_attempts
from .signals import install_cancel_signals, restore_signals
from .writer import LedgerWriter, WriterLedger


POLICY_VERSION = "dome.policy/default@1"
TICK_S = 0.1  # the loop also wakes on every ledger append but QUIET_TOPICS
# A worker's calls before its result (a call's charge, an artifact, a proposal, a heartbeat) give the
# loop nothing to act on: their records do not wake it (the result, an exit, a revocation do).
QUIET_TOPICS = frozenset({CALL_TOPIC, rs.ARTIFACT_PUT, rs.PATCH_SUBMITTED, rs.TASK_PROGRESS})
GC_YOUNG_THRESHOLD = 20_000  # allocations between young collections while a run is driven (Python's default: 700)
FINAL_STATUSES = ("promoted", "blocked", "failed", "cancelled", "completed")




def make_decision(graph: Any, state: RunState, policy: SchedulerPolicy, seed: int, run_id: str,
                  status: Mapping[str, str] | None = None, ready: ReadySet | None = None) -> dict[str, Any] | None:
    """The SchedulingDecision as recorded (pure): what a replay recomputes byte for byte.
    With `ready` (kept current by the run loop) the pass costs O(changed nodes)."""
    decision = ready.decide(state, policy, seed, state.waves + 1) if ready is not None else \
        decide(graph, state, policy, seed, state.waves + 1, status=status)
    if decision is None:
        return None
    return {**decision, "run_id": run_id, "object_id": f"sd-{run_id}-{decision['wave_id']}",
            "ledger_sequence": state.last_sequence, "policy_version": POLICY_VERSION}


class RunLoop(AttemptLifecycle):
    def __init__(self, ctx: RunContext, wq: WorkQueue, run_id: str, repo: Path, base: tuple[str, str],
                 state: RunState, started: Mapping[str, Any]) -> None:
        self.ctx = ctx
        self.wq = wq
        self.run_id = run_id
        self.repo = repo
        self.base_sha, self.base_tree = base
        self.wave_sha, self.wave_tree = base  # the current wave's base (run base, or the integration head)
        self.started = dict(started)
        self.ops_dir = Path(ctx.ops_root) / "runs" / run_id
        self.ops_dir.mkdir(parents=True, exist_ok=True)
        self.graph = wq.graph
        self.tool_dirs = tuple(dict.fromkeys((*wq.tool_dirs, *ctx.tool_dirs)))
        self.limits = replace(Limits.from_work_queue(wq.limits), tool_dirs=self.tool_dirs)
        if ctx.executor is None:
            ctx.executor = make_run_executor(wq, kind=ctx.executor_kind, sandbox=ctx.sandbox,
                                             max_parallel=ctx.max_parallel, image=ctx.image,
                                             gateway_bind=ctx.gateway_bind, tool_dirs=self.tool_dirs)
        self.executor = ctx.executor
        par = min(ctx.max_parallel or int(wq.scheduling.get("max_parallel", 4)), self.executor.max_concurrency)
        retries = wq.budgets.get("max_retries")
        self.policy = SchedulerPolicy(
            max_parallel=par,
            endgame_threshold=int(wq.scheduling.get("endgame_threshold", SchedulerPolicy.endgame_threshold)),
            endgame_max_duplicates=int(wq.scheduling.get("endgame_max_duplicates",
                                                         SchedulerPolicy.endgame_max_duplicates)),
            max_total_attempts=None if retries is None else len(self.graph) + int(retries))
        self.seed = int(self.started["determinism_seed"])
        self.heartbeat_s = wq.scheduling.get("heartbeat_timeout_s")
        self.live: dict[str, Live] = {}
        self.attempts: dict[str, dict[str, Any]] = {}
        self._derived: dict[tuple[str, ...], DerivedBase] = {}
        self._to_check: set[str] = set(wq.graph.nodes)  # nodes whose acks/losers need a look (all, at start)
        self._acks: list[tuple[str, dict, dict]] = []  # task.ack drafts _supervise holds for _schedule
        self._idle_at = -1  # writer.appends when the scheduler last found nothing to do
        self.ready = ReadySet(self.graph, state)  # statuses and ready nodes, updated by what changes
        self.writer = LedgerWriter(ctx.ledger, run_id, ctx.signer, state, on_record=self._on_record,
                                   guard=self._check_lease, quiet=QUIET_TOPICS)
        self.verifier = GrantVerifier(ctx.keyring, WriterLedger(self.writer), group_commit=True)
        self.verifier.follow_run(run_id)  # revocations reach it through _on_record: listings skip the query
        self.work = make_run_dir(run_id)  # findable by run id: sweep_attempt_dirs after a kill -9
        self.base_git = self.work / "base.git"
        self.pub = self.work / "coordinator.pub"
        self.socket = self.work / "gw.sock"
        self.cancel_reason: str | None = None
        self.gateway: WorkerGateway | None = None
        self.tls_front: Any = None  # the gateway over TCP+TLS (workers on other hosts)
        self.egress_gate: Any = None
        # the executor's pinned worker image (containers), else the host's environment
        self.container_ref = getattr(self.executor, "container_ref", None) or \
            host_container_ref(self.started.get("environment", {}))
        self.timings = {"coordinator_s": 0.0, "ticks": 0}
        self.resumed = False
        self.lease: LeaseKeeper | None = None  # taken by start()/resume() before any write
        self.canvas: Any = None  # canvas_driver.CanvasDriver with scheduling.integrate_during_run
        self.extra_nodes: dict[str, Any] = {}  # resolver tasks the canvas added (not in the graph)

    # -- construction -----------------------------------------------------------
    @classmethod
    def start(cls, queue_path: Path | str, ctx: RunContext, *, run_id: str | None = None,
              prepared: Prepared | None = None) -> "RunLoop":
        # pre-flight before anything is written (the CLI runs it before it opens the ledger)
        prep = prepared or prepare(queue_path, integrate=ctx.finish is not None, tool_dirs=ctx.tool_dirs,
                                   sandbox=ctx.sandbox if ctx.executor_kind != "container" else "container",
                                   ops_root=Path(ctx.ops_root))
        queue_path, wq, repo, sha, tree = prep.queue_path, prep.wq, prep.repo, prep.base_sha, prep.base_tree
        run_id = run_id or new_run_id()
        seed = wq.seed if ctx.seed is None else int(ctx.seed)
        ops_dir = Path(ctx.ops_root) / "runs" / run_id
        ops_dir.mkdir(parents=True, exist_ok=True)
        (ops_dir / "work.queue.json").write_text(json.dumps(wq.raw, indent=2, sort_keys=True) + "\n")
        env = environment(ctx.executor_kind, ctx.sandbox)
        started = {
            "artifact_kind": "dome.run.manifest/v1", "run_id": run_id, "work_queue_digest": wq.digest,
            "work_queue_path": str(queue_path), "repo": str(repo), "base_ref_input": wq.base_ref,
            "base_ref": sha, "base_tree_hash": tree, "determinism_seed": seed, "policy": wq.policy,
            "policy_version": POLICY_VERSION, "registry_ref": registry_ref(), "environment": env,
            "graph_digest": wq.graph.digest, "nodes": len(wq.graph), "promote_to": wq.promote_to,
            "created_at": utc_stamp(),
            **({"submitted_by": ctx.submitted_by} if ctx.submitted_by else {}),
            **({"human_gate_reasons": list(wq.human_gate_reasons)} if wq.human_gate_reasons else {}),
            **({"base_source": prep.base_source, "target_at_load": prep.target_sha}
               if prep.base_source != "base_ref" else {}),
        }
        lease = LeaseKeeper.take(ctx.ledger, run_id, ctx.lease_ttl_s)
        if ctx.submitted_by:  # every record of the run names the client (a resume reads it from the first)
            ctx.ledger.submitted_by(run_id, ctx.submitted_by)
        loop = cls(ctx, wq, run_id, repo, (sha, tree), RunState(), started)
        loop.started, loop.lease = started, lease
        loop.writer.append(rs.RUN_STARTED, started, signed=True)
        return loop

    @classmethod
    def resume(cls, run_id: str, ctx: RunContext) -> "RunLoop":
        """Carry on a run from its ledger. Refused (RunLeaseHeld) while another
        coordinator holds the run's lease; nothing is written before it is ours."""
        if not ctx.ledger.head(run_id):
            raise RunNotFound(f"no run {run_id!r} in the ledger", details={"run_id": run_id})
        lease = LeaseKeeper.take(ctx.ledger, run_id, ctx.lease_ttl_s)
        try:
            loop = cls._from_ledger(run_id, ctx)
        except BaseException:
            lease.stop()
            raise
        loop.lease = lease
        loop.resumed = True
        loop._remove_stale_work()
        return loop

    @classmethod
    def _from_ledger(cls, run_id: str, ctx: RunContext) -> "RunLoop":
        events = ctx.ledger.events(run_id)
        state = fold(events)
        started = dict(state.started or {})
        ops_dir = Path(ctx.ops_root) / "runs" / run_id
        qfile = ops_dir / "work.queue.json"
        raw = json.loads(qfile.read_text()) if qfile.exists() else json.loads(Path(started["work_queue_path"]).read_text())
        wq = parse_work_queue(raw)
        if started.get("human_gate_reasons"):  # a resumed run is held at the gate as its start said
            wq = replace(wq, human_gate_reasons=tuple(started["human_gate_reasons"]))
        if wq.digest != started.get("work_queue_digest"):
            raise RunError("the work queue changed since the run started", code="WORK_QUEUE_CHANGED",
                           details={"recorded": started.get("work_queue_digest"), "now": wq.digest})
        ctx.executor_kind = started.get("environment", {}).get("executor", ctx.executor_kind)
        return cls(ctx, wq, run_id, Path(started["repo"]), (started["base_ref"], started["base_tree_hash"]),
                   state, started)

    def _check_lease(self) -> None:
        if self.lease is not None:
            self.lease.check()

    def _remove_stale_work(self) -> None:
        """A killed coordinator's temp dir (attempt dirs with spawn.json and worker.key,
        the gateway socket, the base mirror): its lease lapsed, so nobody uses it."""
        sweep_attempt_dirs(self.run_id, keep=self.work)

    # -- events -----------------------------------------------------------------
    def _on_record(self, rec: Any) -> None:
        self.ready.note(rec, self.writer.state)
        self.verifier.observe(rec)
        if rec.topic == rs.TASK_COMPLETED and rec.node_id:
            self._to_check.add(rec.node_id)  # a winner to ack, maybe endgame losers to cancel
        if self.canvas is not None:
            self.canvas.on_record(rec)
        if rec.topic == rs.TASK_PROGRESS:
            live = self.live.get(rec.node_execution_id or "")
            if live is not None:
                live.last_beat = time.monotonic()
        if self.ctx.view is not None:
            self.ctx.view.on_record(rec, self)

    # -- setup ------------------------------------------------------------------
    def _prepare(self) -> None:
        r = subprocess.run(["git", "clone", "--quiet", "--bare", "--local", "--no-hardlinks", str(self.repo),
                            str(self.base_git)], capture_output=True, text=True)
        if r.returncode != 0:
            raise RunError(f"cannot mirror the repository: {r.stderr.strip()[:300]}", code="REPO_UNAVAILABLE")
        if subprocess.run(["git", "--git-dir", str(self.base_git), "cat-file", "-e", f"{self.base_sha}^{{commit}}"],
                          capture_output=True).returncode != 0:
            subprocess.run(["git", "--git-dir", str(self.base_git), "fetch", "--quiet", str(self.repo), self.base_sha],
                           capture_output=True)
        write_snapshot(self.base_git, self.base_sha)  # attempts check the base out without git
        import base64
        self.pub.write_text(f"{self.ctx.signer.kid} {base64.b64encode(self.ctx.signer.public.raw).decode()}\n")
        backend = GatewayBackend(run_id=self.run_id, writer=self.writer, blobs=self.ctx.ledger.blobs,
                                 attempt=self.attempts.get)
        self.gateway = WorkerGateway(run_id=self.run_id, verifier=self.verifier,
                                     dispatcher=ToolDispatcher(build_tools(backend)), socket_path=self.socket,
                                     attempt=self.attempts.get)
        self.gateway.start()
        if self.ctx.egress is not None:
            from coordinator.egress.gate import EgressGate

            self.egress_gate = EgressGate(run_id=self.run_id, verifier=self.verifier, config=self.ctx.egress,
                                          transact=self.writer.transact, blobs=self.ctx.ledger.blobs,
                                          socket_path=self.work / "egress.sock")
            self.egress_gate.start()
        bind = getattr(self.executor, "gateway_bind", None)
        if bind is not None:  # workers on other hosts: the gateway (and egress gate) over TCP with TLS
            from ..gateway.tls import EGRESS_ALPN, TlsFront, make_certificate

            services = {EGRESS_ALPN: self.egress_gate.socket_path} if self.egress_gate is not None else {}
            self.tls_front = TlsFront(bind[0], bind[1], make_certificate(self.work, [bind[0]]), self.socket,
                                      services=services)
            host, port = self.tls_front.start()
            self.executor.connect_gateway(host, port, self.tls_front.certificate.cert_pem, egress=bool(services))

    def _recover(self) -> None:
        """Attempts in flight when a previous coordinator died are lost: record it, revoke, reschedule."""
        record_lost_attempts(self.writer, self.run_id, environment(self.ctx.executor_kind, self.ctx.sandbox))

    # -- dispatch ---------------------------------------------------------------
    def _wave_base(self) -> str:
        """Pick the new wave's base: the run base, or (when the queue asks for it and the
        integration stage offers one) the current integration head. Returns its source."""
        hook = self.ctx.wave_base or (self.canvas.wave_base if self.canvas is not None else None)
        if not self.wq.scheduling.get("rebase_waves_on_integration_head") or hook is None:
            return "run_base" if self.wave_sha == self.base_sha else "integration_head"
        head = hook(self)
        if head is None:
            return "run_base" if self.wave_sha == self.base_sha else "integration_head"
        sha, tree = head
        self.ensure_commit(sha)
        self.wave_sha, self.wave_tree = sha, tree
        return "run_base" if sha == self.base_sha else "integration_head"

    def ensure_commit(self, sha: str) -> None:
        """Workers check out from the run's mirror: fetch a commit made since (an integration head)."""
        if subprocess.run(["git", "--git-dir", str(self.base_git), "cat-file", "-e", f"{sha}^{{commit}}"],
                          capture_output=True).returncode != 0:
            subprocess.run(["git", "--git-dir", str(self.base_git), "fetch", "--quiet", str(self.repo), sha],
                           capture_output=True, check=True)
        write_snapshot(self.base_git, sha)  # once per commit: attempts check it out without git

    def _inputs(self, node_id: str, base: str | None = None) -> tuple[int, str]:
        nseed = node_seed(self.seed, node_id)
        return nseed, digest_json({"task": self.node(node_id).task_spec_digest,
                                   "base": base or self.wave_sha, "seed": nseed})

    def _schedule(self) -> int:
        with self.writer.lock:
            if self.writer.appends == self._idle_at and not self._acks:  # nothing new since the last empty pass
                return 0
            st = self.writer.state
            decision = make_decision(self.graph, st, self.policy, self.seed, self.run_id, ready=self.ready)
            if decision is None:
                self._write_acks()
                if not self._abandon_stranded(self.writer.state):  # (a recorded abandonment is news: look again)
                    self._idle_at = self.writer.appends
                return 0
            wave_id = decision["wave_id"]
            base_source = self._wave_base()
            drafts: list[tuple[str, dict, dict]] = [
                (rs.SCHEDULING_DECISION, decision, {"wave_id": wave_id}),
                (rs.WAVE_STARTED, {"wave_id": wave_id, "base_ref": self.wave_sha, "base_tree_hash": self.wave_tree,
                                   "base_source": base_source, "nodes": [e["node_id"] for e in decision["selected"]]},
                 {"wave_id": wave_id}),
            ]
            launches = []
            for e in decision["selected"]:
                nid = e["node_id"]
                base_sha, base_tree, derivation = self._base_for(nid)
                more, launch = self.draft_attempt(nid, wave_id, e["attempt"], e["kind"], (base_sha, base_tree),
                                                  derivation=derivation)
                drafts.extend(more)
                launches.append(launch)
            # the acks _supervise held go after the wave (the decision was made on the state before
            # them, which is what a replay folds), in the same transaction: one commit, not two
            drafts.extend(self._acks)
            self._acks = []
            self.writer.append_many(drafts, signed=SIGNED_TOPICS)
        self.launch(launches)
        return len(launches)

    def _abandon_stranded(self, st: Any) -> bool:
        """Record the ready nodes the spent retry budget leaves with no way to run (else the
        run would wait for them for ever); True when it recorded any."""
        nodes = stranded(self.ready.status, st, self.policy)
        if not nodes:
            return False
        spent = st.total_attempts - st.lost_attempts
        self.writer.append_many([
            (rs.TASK_ABANDONED, {"node_id": nid, "code": RETRY_BUDGET_EXHAUSTED, "failures": st.node(nid).failures,
                                 "max_attempts": self.graph.nodes[nid].max_attempts, "attempts_spent": spent,
                                 "max_total_attempts": self.policy.max_total_attempts,
                                 "reason": "the run's retry budget (budgets.max_retries) is spent"},
             {"node_id": nid}) for nid in nodes])
        return True

    def node(self, node_id: str) -> Any:
        """A node of the graph, or a resolver task the canvas added (resolver.ResolverNode)."""
        return self.graph.nodes[node_id] if node_id in self.graph.nodes else self.extra_nodes[node_id]

    def _done(self) -> bool:
        if self.live or self.executor.running():
            return False
        with self.writer.lock:
            self.ready.refresh(self.writer.state)
            done = self.ready.done()
        return done and (self.canvas is None or not self.canvas.busy())

    def cancel(self, reason: str = "cancelled by the user") -> None:
        self.cancel_reason = reason

    # -- main ---------------------------------------------------------------------
    def run(self) -> RunOutcome:
        if self.lease is None:  # built without start()/resume(): take the run now
            self.lease = LeaseKeeper.take(self.ctx.ledger, self.run_id, self.ctx.lease_ttl_s)
        self.lease.start()
        try:
            st = self.writer.state
            if st.finished is not None:  # nothing to write; the files a kill may have cut short are rebuilt
                self._export()
                return self._outcome(st.finished)
            return self._drive()
        finally:
            self.lease.stop()
            shutil.rmtree(self.work, ignore_errors=True)

    def _drive(self) -> RunOutcome:
        assert self.lease is not None
        self._prepare()
        old_handlers = install_cancel_signals(self.cancel)
        from .canvas_driver import driver_for  # integration's modules: loaded once the run is under way
        self.canvas = driver_for(self)
        # what start-up made (modules, registry, graph, gateway) lives as long as the run: keep it out
        # of the cyclic collector's full passes, which would otherwise walk it again and again; and
        # collect the young generation less often (most of a task's objects are gone by then)
        gc.freeze()
        thresholds = gc.get_threshold()
        gc.set_threshold(max(thresholds[0], GC_YOUNG_THRESHOLD), max(thresholds[1], 20), thresholds[2])
        try:
            if self.resumed:
                self.lease.check()
                self._recover()
                if self.canvas is not None:
                    self.canvas.restore()
            while True:
                self.lease.check()  # a coordinator that lost the run stops (every write checks too)
                t0 = time.perf_counter()
                c0 = time.thread_time()
                self._reap()
                self._supervise()
                if self.cancel_reason is not None:
                    return self._cancel_all()
                if self.canvas is not None:
                    self.canvas.tick()  # a batch of accepted proposals onto the canvas; resolvers
                launched = self._schedule()
                self.timings["coordinator_s"] += time.perf_counter() - t0
                self.timings["coordinator_cpu_s"] = self.timings.get("coordinator_cpu_s", 0.0) + time.thread_time() - c0
                self.timings["ticks"] += 1
                if self._done():
                    return self._finish()
                if self.ctx.view is not None:
                    self.ctx.view.tick(self)
                if not launched:
                    self.writer.wait(TICK_S)
        finally:
            gc.unfreeze()  # back to the collector: a process that runs again frees what this run left
            gc.set_threshold(*thresholds)
            restore_signals(old_handlers)
            self.executor.shutdown()
            if self.canvas is not None:
                self.canvas.close()
            if self.gateway is not None:
                self.gateway.stop()
            self.verifier.close()
            if self.tls_front is not None:
                self.tls_front.stop()
            if self.egress_gate is not None:
                self.egress_gate.stop()

    def _cancel_all(self) -> RunOutcome:
        self._write_acks()
        for neid in list(self.live):
            self.executor.kill(neid, "run cancelled")
            self._end_attempt(neid, rs.TASK_CANCELLED, {"reason": self.cancel_reason}, "run cancelled")
        return self._record_finish({"status": "cancelled", "head": self.base_sha, "promoted_ref": None,
                                    "reason": self.cancel_reason})

    def _accepted_proposals(self) -> list[dict[str, Any]]:
        st = self.writer.state
        winners = {st.node(n).succeeded_by for n in self.graph.nodes if st.node(n).succeeded}
        return [p for p in st.proposals if p["node_execution_id"] in winners]

    def _finish(self) -> RunOutcome:
        from .partial import decide
        st = self.writer.state
        node_status = statuses(self.graph, st)
        decision = decide(node_status, self.wq.if_tasks_fail)
        fc = FinishedRun(run_id=self.run_id, work_queue=self.wq, repo=self.repo, base_ref=self.base_sha,
                           base_tree_hash=self.base_tree, state=st, node_status=node_status, partial=decision,
                           proposals=self._accepted_proposals(), writer=self.writer, ops_dir=self.ops_dir,
                           ledger=WriterLedger(self.writer),  # integration's writes are fenced by the lease too
                           signer=self.ctx.signer, ops_root=Path(self.ctx.ops_root),
                           sandbox=self.ctx.sandbox, seed=self.seed, view=self.ctx.view, canvas=self.canvas,
                           tool_dirs=self.tool_dirs)
        if not decision.integrate:
            result = default_finish(fc)  # tasks failed and the queue promotes nothing then
        else:  # a partial run (promote_rest) says so, and which tasks did not land
            result = {**(self.ctx.finish or default_finish)(fc), **decision.record()}
        if result.get("status") not in FINAL_STATUSES:
            raise RunError(f"finish stage returned an unknown status {result.get('status')!r}")
        return self._record_finish(result)

    def _record_finish(self, result: dict[str, Any]) -> RunOutcome:
        st = self.writer.state
        status = statuses(self.graph, st)
        counts = {k: sum(1 for v in status.values() if v == k) for k in ("succeeded", "failed", "blocked", "pending",
                                                                          "ready", "running")}
        counts["attempts"] = st.total_attempts
        from coordinator.run_cost import current_cost
        # what the run cost the machine (this process's share of it, on a resumed run)
        payload = {**result, "counts": counts, "proposals": [p["proposal_id"] for p in self._accepted_proposals()],
                   "finished_at": utc_stamp(), "cost": current_cost(self.executor)}
        payload = offload_finish_lists(self.ctx.ledger.blobs, payload)  # no payload grows with N
        self.writer.append(rs.RUN_FINISHED, payload, signed=True)
        self._export()
        return self._outcome(payload)

    def _export(self) -> None:
        from .export import write_run_files
        write_run_files(self.ctx.ledger, self.run_id, Path(self.ctx.ops_root), self.graph)

    def _outcome(self, finished: Mapping[str, Any]) -> RunOutcome:
        return RunOutcome(run_id=self.run_id, status=finished["status"], head=finished.get("head"),
                          promoted_ref=finished.get("promoted_ref"), ops_path=str(self.ops_dir),
                          counts=dict(finished.get("counts", {})),
                          awaiting_consent=bool(finished.get("awaiting_consent")),
                          consent_token_file=finished.get("consent_token_file"), cost=finished.get("cost"))
