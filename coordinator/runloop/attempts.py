"""The attempt lifecycle of the run loop: the base an attempt starts from, its
SpawnSpec, grant and dispatch drafts, its launch, and its supervision until it
ends (exit, timeout, endgame loss).

`RunLoop` inherits these; they use its state (writer, executor, graph, the
attempts in flight) and keep every decision a ledger event through the writer.
"""
from __future__ import annotations

import functools
import secrets
import time
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from registry.canonical import digest_json
from registry.signing import SigningKey

from .. import runstate as rs
from ..executors.attempts import remove_attempt_dir, write_attempt
from ..executors.base import ExitInfo, dispatch_error, validate_spawn_spec
from ..executors.sandbox import IN_SOCKET
from ..gateway import auth as grants_io
from .derived_base import build_derived_base, plan_derived_base
from .manifest import egress_terms, utc_stamp

TASK_BASE_DERIVED = "task.base_derived"


class _Dependencies(Mapping[str, Sequence[str]]):
    """The graph's dependency lists, read one node at a time (nothing copies the whole graph)."""

    def __init__(self, nodes: Mapping[str, Any]) -> None:
        self._nodes = nodes

    def __getitem__(self, nid: str) -> Sequence[str]:
        if nid not in self._nodes:
            raise KeyError(nid)
        return self._nodes[nid].dependencies

    def __iter__(self) -> Iterator[str]:
        raise TypeError("dependencies are read one node at a time")

    def __len__(self) -> int:
        return len(self._nodes)


class _Winners(Mapping[str, Mapping[str, Any]]):
    """The winning proposal of a graph node, looked up when asked for."""

    def __init__(self, nodes: Mapping[str, Any], state: Any) -> None:
        self._nodes, self._st = nodes, state

    def __getitem__(self, nid: str) -> Mapping[str, Any]:
        ns = self._st.node(nid) if nid in self._nodes else None
        if ns is None or not ns.succeeded or ns.succeeded_by not in self._st.proposal_of:
            raise KeyError(nid)
        return self._st.proposal_of[ns.succeeded_by]

    def __iter__(self) -> Iterator[str]:
        raise TypeError("winners are looked up one node at a time")

    def __len__(self) -> int:
        return len(self._nodes)


def ancestor_plan(node_id: str, nodes: Mapping[str, Any], state: Any) -> list[Mapping[str, Any]]:
    """The winning proposals of node_id's ancestors, ancestors first (derived_base.plan_derived_base),
    in O(ancestors): only the ancestors' states and proposals are read."""
    return plan_derived_base(node_id, _Dependencies(nodes), _Winners(nodes, state))


@dataclass
class Live:
    """An attempt in flight: its node, deadline, last heartbeat and grant."""
    node_id: str
    deadline: float
    last_beat: float
    grant_jti: str
    profile_id: str


class AttemptLifecycle:
    """One attempt from its base to its end; mixed into RunLoop."""

    live: dict[str, Live]
    attempts: dict[str, dict[str, Any]]
    timings: dict[str, Any]
    canvas: Any
    _acks: list[tuple[str, dict[str, Any], dict[str, Any]]]  # task.ack drafts for the next transaction

    def _base_for(self, node_id: str) -> tuple[str, str, dict[str, Any] | None]:
        """The commit an attempt of node_id starts from: the run base, or a derived
        base holding the winning proposals of its ancestors (see derived_base.py)."""
        st = self.writer.state
        if not st.proposals or not self.node(node_id).dependencies:
            plan: list = []
        else:
            plan = ancestor_plan(node_id, self.graph.nodes, st)
        if not plan or self.wave_sha != self.base_sha:  # a wave on the integration head has its ancestors in it
            return self.wave_sha, self.wave_tree, None
        key = tuple(str(p.get("proposal_id")) for p in plan)
        derived = self._derived.get(key)
        if derived is None:
            from coordinator.integration.finish import default_diff_loader

            derived = build_derived_base(self.base_git, self.base_sha, plan, default_diff_loader(self.ctx.ledger),
                                         ref_name=f"refs/dome/bases/{digest_json(list(key))[7:23]}")
            self._derived[key] = derived
        return derived.base_ref, derived.base_tree_hash, derived.to_event(node_id)

    def _spawn_spec(self, node_id: str, neid: str, wave_id: str, attempt: int, grant: Any,
                    base: tuple[str, str], inputs: tuple[int, str], profile_ref: str) -> dict[str, Any]:
        """`inputs`: (seed, inputs hash) from RunLoop._inputs; `profile_ref`: the grant's profile digest."""
        node = self.node(node_id)
        base_sha, base_tree = base
        nseed, inputs_hash = inputs
        return {
            "artifact_kind": "dome.spawn_spec/v1", "version": "1.0.0",
            "run_id": self.run_id, "wave_id": wave_id, "node_id": node_id, "node_execution_id": neid,
            "task_id": node_id, "task_spec_ref": node.task_spec_digest,
            "tool_profile_ref": profile_ref,
            "container_ref": (node.task.get("containers") or [self.container_ref])[0],
            "action_spec": dict(node.action_spec), "determinism_seed": nseed,
            "inputs_hash": inputs_hash,
            "base_ref": base_sha, "base_tree_hash": base_tree, "attempt": attempt,
            "created_at": utc_stamp(), "gateway": {"socket": IN_SOCKET if self.ctx.sandbox == "bwrap" else str(self.socket)},
            "grant": grant.envelope, "timeout_s": node.timeout_s,
        }

    def draft_attempt(self, nid: str, wave_id: str, attempt: int, kind: str, base: tuple[str, str], *,
                      derivation: dict[str, Any] | None = None) -> tuple[list, tuple]:
        """The ledger drafts (grant, dispatch) of one attempt and what launch() needs to start it."""
        node = self.node(nid)
        base_sha, base_tree = base
        neid = f"ne-{secrets.token_hex(8)}"
        nseed, inputs_hash = self._inputs(nid, base_sha)
        worker_key = SigningKey.generate()  # per attempt; only its public half is in the grant (cnf)
        grant = grants_io.issue_grant(
            key=self.ctx.signer, run_id=self.run_id, wave_id=wave_id, node_id=nid, node_execution_id=neid,
            capabilities=list(node.task.get("required_capabilities", [])), ttl_s=node.timeout_s + 120,
            policy_id=self.wq.policy, seed=nseed, inputs_hash=inputs_hash,
            worker_public_key=worker_key.public.raw, egress=egress_terms(node.action_spec))
        issued, issued_bytes = grants_io.issued_payload(grant)  # the profile's signed bytes spliced in
        pref = issued["payload_digest"]  # the grant's profile digest (grants_io.profile_ref), computed once
        spec = self._spawn_spec(nid, neid, wave_id, attempt, grant, (base_sha, base_tree), (nseed, inputs_hash),
                                pref)
        validate_spawn_spec(spec)
        keys = {"node_id": nid, "node_execution_id": neid, "wave_id": wave_id, "task_id": nid}
        drafts: list[tuple[str, dict, dict]] = []
        if derivation is not None:
            drafts.append((TASK_BASE_DERIVED, {**derivation, "node_execution_id": neid}, keys))
        drafts.append((grants_io.ISSUED_TOPIC, issued, {**keys, "payload_canonical": issued_bytes}))
        drafts.append((rs.TASK_DISPATCHED, {
            "node_execution_id": neid, "attempt": attempt, "kind": kind, "wave_id": wave_id,
            "spawn_spec_digest": digest_json(spec), "tool_profile_ref": pref,
            "profile_id": grant.profile_id, "jti": grant.jti,
            "executor": self.executor.name, "sandbox": self.ctx.sandbox, "base_ref": base_sha,
            "timeout_s": node.timeout_s}, dict(keys)))
        return drafts, (nid, neid, spec, grant, worker_key)

    def launch(self, launches: list[tuple]) -> None:
        now, c0 = time.monotonic(), time.thread_time()
        for nid, neid, spec, grant, worker_key in launches:
            self.verifier.bind_call_key(grant.jti, worker_key, issued=grant)  # MAC proofs; the token enters warm
            node = self.node(nid)
            write = functools.partial(write_attempt, self.work, spec, worker_key, node.task, self.limits,
                                      egress_socket=self.egress_gate.socket_path if self.egress_gate else None)
            del worker_key
            self.attempts[neid] = {"node_id": nid, "wave_id": spec["wave_id"], "attempt": spec.get("attempt"),
                                   "base_ref": spec["base_ref"],
                                   "base_tree_hash": spec["base_tree_hash"], "task": node.task}
            self.live[neid] = Live(nid, now + node.timeout_s, now, grant.jti, grant.profile_id)
            try:  # the local executor writes the files on its spawner thread, others before they dispatch
                self.executor.dispatch(spec, write if getattr(self.executor, "deferred_files", False) else write())
            except Exception as exc:  # noqa: BLE001 - recorded, the node is retried
                self._end_attempt(neid, rs.TASK_FAILED, {"reason": "dispatch failed", "error": dispatch_error(exc)},
                                  None)
        self.timings["launch_cpu_s"] = self.timings.get("launch_cpu_s", 0.0) + time.thread_time() - c0

    # -- supervision --------------------------------------------------------------
    def _end_attempt(self, neid: str, topic: str, payload: dict[str, Any], revoke_reason: str | None) -> None:
        att = self.attempts.get(neid) or self.writer.state.executions.get(neid, {})
        live = self.live.pop(neid, None)
        nid = att.get("node_id")
        if neid not in self.writer.state.ended:
            self.writer.append(topic, {"node_execution_id": neid, **payload}, node_id=nid, node_execution_id=neid,
                               wave_id=att.get("wave_id"), task_id=nid)
        if revoke_reason and live is not None:
            self.writer.revoke(jti=live.grant_jti, profile_id=live.profile_id, reason=revoke_reason)

    def _reap(self) -> None:
        for ex in self.executor.poll():
            self._on_exit(ex)

    def _on_exit(self, ex: ExitInfo) -> None:
        neid = ex.node_execution_id
        remove_attempt_dir(self.work / "attempts" / neid)  # the worker is gone: its files and key go too
        self.verifier.drop_call_key(self.writer.state.executions.get(neid, {}).get("jti", ""))
        att = self.attempts.get(neid, {})
        for v in ex.violations:
            self.writer.append(rs.SANDBOX_VIOLATION, {"node_execution_id": neid, **v, "stopped": True},
                               node_id=att.get("node_id"), node_execution_id=neid, wave_id=att.get("wave_id"),
                               task_id=att.get("node_id"))
        if neid in self.writer.state.ended:
            self.live.pop(neid, None)
            return
        if ex.spawn_error is not None:  # the executor could not start it (on its spawner thread)
            self._end_attempt(neid, rs.TASK_FAILED, {"reason": "dispatch failed", "error": ex.spawn_error}, None)
            return
        self._end_attempt(neid, rs.TASK_FAILED, {"reason": "worker exited without reporting a result",
                                                 "exit_code": ex.returncode, "signal": ex.signal,
                                                 "stderr_tail": ex.stderr_tail[-2000:]}, "worker exited")

    def _supervise(self) -> None:
        now = time.monotonic()
        for neid, live in list(self.live.items()):
            hung = self.heartbeat_s is not None and now - live.last_beat > float(self.heartbeat_s)
            if now > live.deadline or hung:
                self.executor.kill(neid, "timeout")
                self._end_attempt(neid, rs.TASK_TIMEOUT, {
                    "reason": "heartbeat missed" if hung and now <= live.deadline else "wall-clock timeout",
                    "timeout_s": self.node(live.node_id).timeout_s, "killed": "process group"},
                    "attempt timed out")
        st = self.writer.state
        acks = []
        check, self._to_check = self._to_check, set()
        for nid in sorted(check):
            ns = st.node(nid)
            if ns.succeeded:
                for loser in ns.active:
                    self.executor.kill(loser, "endgame loser")
                    self._end_attempt(loser, rs.TASK_CANCELLED, {"reason": "another attempt won",
                                                                 "winner": ns.succeeded_by}, "endgame: another attempt won")
                if ns.acked:
                    continue
                if ns.succeeded_by in self.live:
                    # its process is not reaped yet: the executor's sweep of its cgroups may still find
                    # a limit it hit, which fails the attempt; ack once it has exited
                    self._to_check.add(nid)
                    continue
                acks.append(nid)
        if acks:
            drafts = [(rs.TASK_ACK, {"node_execution_id": st.node(n).succeeded_by, "accepted": True,
                                     "proposal_id": (st.proposal_of.get(st.node(n).succeeded_by)
                                                     or {}).get("proposal_id")},
                       {"node_id": n, "node_execution_id": st.node(n).succeeded_by, "task_id": n}) for n in acks]
            if self.canvas is None:  # they join the next wave's transaction (or go alone if none follows)
                self._acks.extend(drafts)
            else:  # the canvas integrates what is acked in this tick
                self.writer.append_many(drafts)

    def _write_acks(self) -> None:
        """The acks `_supervise` held, in a transaction of their own."""
        acks, self._acks = self._acks, []
        if acks:
            self.writer.append_many(acks)
