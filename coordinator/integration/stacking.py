"""The stacking loop (imperative shell over the canvas and the pure planner).

`Stacker.run()` applies the planned proposals layer by layer, takes a
checkpoint per layer (or per batch), turns every conflict into a
ConflictDecision (reorder, guarded split, resolver, drop) and emits each
artifact through `emit(topic, artifact)`; the caller persists them (ledger).
`Stacker.validate()` is speculative validation: the whole stack is
validated; on failure the failing suites bisect the checkpoints to the
culprit layer, which is ejected, the later layers re-applied, and the rest
re-validated, every step recorded.
"""
from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from registry import diffs
from registry.canonical import digest_bytes, digest_json
from registry.diffs import DiffError, ParsedDiff

from .canvas import Attempt, Canvas, Checkpoint
from .planning import (ConflictDecision, OverlapIndex, StackPlan, bisect_culprit, conflict_fingerprint,
                       decide_conflict)
from .policy import IntegrationPolicy
from .validation import suite_name
from .proposals import CheckedProposal

Emit = Callable[[str, dict[str, Any]], Any]  # what it returns (the signed artifact) is not needed here
Validator = Callable[[Checkpoint, Mapping[str, Any]], dict[str, Any]]
ResolverHook = Callable[[dict[str, Any]], Any]

T_APPLY = "integration.apply_result"
T_CONFLICT = "integration.conflict_decision"
T_SPLIT_REQ = "integration.split_request"
T_SPLIT_RES = "integration.split_result"
T_RESOLVER = "integration.resolver_request"
T_CHECKPOINT = "integration.checkpoint"
T_VALIDATION = "integration.validation_report"
T_BISECT = "integration.bisect"
T_EJECT = "integration.ejected"


@dataclass
class Layer:
    proposal_id: str
    diff_digest: str
    parsed: ParsedDiff | None  # a split part's own diff; None: the proposal's, read back when re-applied
    checkpoint: Checkpoint | None = None
    derived_from: str | None = None


@dataclass
class StackState:
    layers: list[Layer] = field(default_factory=list)
    apply_results: dict[str, dict[str, Any]] = field(default_factory=dict)
    why_blocked: dict[str, dict[str, Any]] = field(default_factory=dict)
    escalated_suites: set[str] = field(default_factory=set)
    resolver_requests: list[dict[str, Any]] = field(default_factory=list)
    reports: list[dict[str, Any]] = field(default_factory=list)
    derived: dict[str, dict[str, Any]] = field(default_factory=dict)  # derived id -> split info


class Stacker:
    def __init__(self, canvas: Canvas, checked: Mapping[str, CheckedProposal], plan: StackPlan,
                 index: OverlapIndex, policy: IntegrationPolicy, *, emit: Emit,
                 resolver_hook: ResolverHook | None = None,
                 requires: Mapping[str, Sequence[str]] | None = None,
                 base_inputs: Mapping[str, tuple[str, ...]] | None = None) -> None:
        self.canvas = canvas
        # suite name -> the globs of its inputs, which judge the head from the run's base as well
        self.base_inputs = dict(base_inputs or {})
        canvas.policy = policy  # one policy judges the proposals and the trees they leave
        self.checked = dict(checked)
        self.plan = plan
        self.index = index
        self.policy = policy
        self.emit = emit
        self.resolver_hook = resolver_hook
        self.requires = {k: tuple(v) for k, v in (requires or {}).items()}
        self.state = StackState()
        self._unflushed: list[Layer] = []

    def extend(self, checked: Mapping[str, CheckedProposal], plan: StackPlan, index: OverlapIndex,
               requires: Mapping[str, Sequence[str]] | None = None) -> None:
        """A further batch to stack on the same canvas (`run()` applies it on the head)."""
        self.checked.update(checked)
        self.plan, self.index = plan, index
        self.requires.update({k: tuple(v) for k, v in (requires or {}).items()})

    # -- applying ------------------------------------------------------------
    def run(self) -> StackState:
        queue = deque(self.plan.ordered)
        reorders: Counter[str] = Counter()
        batch = 1 if self.policy.checkpoint_strategy == "per_layer" else max(1, self.policy.batch_size)
        for r in self.plan.rejected:
            self.state.why_blocked[r["proposal_id"]] = {"state": "rejected", "reason": r["reason"],
                                                        "code": r["code"]}
        while queue:
            pid = queue.popleft()
            cp = self.checked[pid]
            if self._missing_requirements(pid, cp.diff_digest):
                continue
            parsed = cp.parsed  # read back for this layer only: no layer keeps its proposal's diff
            att = self.canvas.try_apply(parsed)
            if att.clean:
                self._accept(pid, cp.diff_digest, parsed, att)
                if len(self._unflushed) >= batch:
                    self._flush()
                continue
            self._flush()  # conflicts are judged against a checkpointed head
            if att.violations:
                self._refuse(pid, cp.diff_digest, att)
                continue
            self._conflict(pid, cp, parsed, att, queue, reorders)
        self._flush()
        self.canvas.publish_head()
        self._write_held()  # the per-proposal records, in one commit
        return self.state

    def _accept(self, pid: str, digest: str, parsed: ParsedDiff, att: Attempt,
                derived_from: str | None = None) -> None:
        self.canvas.commit(att, [pid])
        layer = Layer(pid, digest, parsed if derived_from is not None else None, derived_from=derived_from)
        self.state.layers.append(layer)
        self._unflushed.append(layer)
        self.state.why_blocked[pid] = {"state": "applied", "method": att.method}

    def _flush(self) -> None:
        if not self._unflushed:
            return
        trailers = {"Dome-Proposal": [l.proposal_id for l in self._unflushed],
                    "Dome-Diff-Digest": [f"{l.proposal_id} {l.diff_digest}" for l in self._unflushed]}
        names = [self._layer_name(l.proposal_id) for l in self._unflushed]
        label = (f"dome: apply {names[0]} {self._unflushed[0].proposal_id}" if len(names) == 1
                 else f"dome: apply {len(names)} proposals: " + ", ".join(names))
        cp = self.canvas.checkpoint(trailers, label)
        self.emit(T_CHECKPOINT, {"artifact_kind": "dome.checkpoint/v1", "run_id": self.canvas.run_id,
                                 **cp.to_dict()})
        for layer in self._unflushed:
            layer.checkpoint = cp
            self._apply_result(layer, cp)
        self._unflushed = []

    def _layer_name(self, pid: str) -> str:
        """`node (intent)` for a checkpoint's subject line, so `git log` says what landed."""
        cp = self.checked.get(pid.split(":split-")[0])
        prop = cp.proposal if cp is not None else {}
        meta = prop.get("worker_run_meta") if isinstance(prop.get("worker_run_meta"), Mapping) else {}
        node = str(prop.get("node_id") or meta.get("node_id") or pid)
        part = f" part {pid.rsplit(':split-', 1)[1]}" if ":split-" in pid else ""
        return f"{node}{part} ({meta.get('intent') or 'unknown intent'})"

    def _apply_result(self, layer: Layer, cp: Checkpoint) -> None:
        res = {"artifact_kind": "dome.apply_result/v1", "run_id": self.canvas.run_id,
               "proposal_id": layer.proposal_id, "diff_digest": layer.diff_digest,
               "base_ref": self.canvas.base_ref, "applied": True, "conflict_summary": {"files": []},
               "head_tree_hash": cp.tree, "position": len(self.state.apply_results),
               "checkpoint_id": cp.checkpoint_id, "head_ref": cp.commit, "tree": cp.tree,
               "parent_ref": cp.parent, "stack_plan_id": self.plan.stack_plan_id}
        if layer.derived_from:
            res["derived_from"] = layer.derived_from
        self.state.apply_results[layer.proposal_id] = res
        self.emit(T_APPLY, res)

    def _conflict(self, pid: str, cp: CheckedProposal, parsed: ParsedDiff, att: Attempt, queue: deque,
                  reorders: Counter) -> None:
        conflicts = [c.to_dict() for c in att.conflicts]
        keep = self._applicable_parts(cp, parsed, att)
        total = self._total_parts(cp, parsed)
        resolver_ok = self._resolver_ok(pid)
        dec = decide_conflict(proposal_id=pid, atomicity=str(cp.proposal.get("atomicity", "atomic_proposal")),
                              conflicts=conflicts, applicable_parts=len(keep), total_parts=total,
                              reorders_used=reorders[pid], later_pending=len(queue),
                              policy=self.policy, head_ref=self.canvas.head,
                              resolver_available=resolver_ok)
        if dec.action == "drop":
            dec = self._why_dropped(pid, dec)
        elif dec.action == "resolver":
            dec = self._how_resolved(pid, dec)
        self.emit(T_CONFLICT, {**dec.to_dict(), "run_id": self.canvas.run_id,
                               "head_ref": self.canvas.head})
        if dec.action == "reorder":
            reorders[pid] += 1
            queue.append(pid)
            self.state.why_blocked[pid] = {"state": "reordered", "conflicts": conflicts}
            return
        if dec.action == "split":
            if self._split(pid, cp, parsed, keep, dec):
                return
            dec = ConflictDecision(pid, "resolver" if resolver_ok else "drop",
                                   dec.conflict_fingerprint, dec.conflicts,
                                   "split part no longer applies")
            self.emit(T_CONFLICT, {**dec.to_dict(), "run_id": self.canvas.run_id,
                                   "head_ref": self.canvas.head})
        self._not_applied(pid, cp.diff_digest, conflicts, dec)

    def _resolver_ok(self, pid: str) -> bool:
        """A resolver may take this conflict: a hook is there and (if it keeps count) has a try left."""
        if self.resolver_hook is None:
            return False
        avail = getattr(self.resolver_hook, "available", None)
        return True if avail is None else bool(avail(pid))

    def _why_dropped(self, pid: str, dec: ConflictDecision) -> ConflictDecision:
        why = getattr(self.resolver_hook, "why_not", None)
        reason = why(pid) if why is not None else None
        return replace(dec, reason=f"{dec.reason} ({reason})") if reason else dec

    def _how_resolved(self, pid: str, dec: ConflictDecision) -> ConflictDecision:
        """The hook's own words for the resolver it will start (a task's rerun says so)."""
        how = getattr(self.resolver_hook, "how", None)
        reason = how(pid) if how is not None else None
        return replace(dec, reason=reason) if reason else dec

    def _not_applied(self, pid: str, digest: str, conflicts: list[dict[str, Any]],
                     dec: ConflictDecision) -> None:
        res = {"artifact_kind": "dome.apply_result/v1", "run_id": self.canvas.run_id,
               "proposal_id": pid, "diff_digest": digest, "base_ref": self.canvas.base_ref,
               "applied": False,
               "conflict_summary": {"files": sorted({c["path"] for c in conflicts}),
                                    "hunks": self._conflict_fingerprints(pid, conflicts),
                                    "conflicts": conflicts},
               "head_ref": self.canvas.head,
               "stack_plan_id": self.plan.stack_plan_id, "decision": dec.action}
        self.state.apply_results[pid] = res
        self.emit(T_APPLY, res)
        if dec.action == "resolver":
            req = {"artifact_kind": "dome.resolver_request/v1", "run_id": self.canvas.run_id,
                   "proposal_id": pid, "diff_digest": digest, "head_ref": self.canvas.head,
                   "conflicts": conflicts, "conflict_fingerprint": dec.conflict_fingerprint}
            self.state.resolver_requests.append(req)
            self.emit(T_RESOLVER, req)
            assert self.resolver_hook is not None
            self.resolver_hook(req)
            self.state.why_blocked[pid] = {"state": "awaiting_resolver", "head_ref": self.canvas.head,
                                           "conflicts": conflicts}
        else:
            self.state.why_blocked[pid] = {"state": "dropped", "reason": "conflict",
                                           "detail": dec.reason, "conflicts": conflicts}

    def _refuse(self, pid: str, digest: str, att: Attempt) -> None:
        """The resulting tree would break policy: the proposal is dropped whole
        (no reorder, no split: a later order cannot make the tree it asks for
        acceptable, and no part of a hostile proposal lands)."""
        cs = [{"path": str(v.details.get("path", "*")), "hunk": None, "reason": f"{v.code}: {v.message}",
               "code": v.code} for v in att.violations]
        dec = ConflictDecision(pid, "drop", conflict_fingerprint(pid, self.canvas.head, cs), tuple(cs),
                               "the resulting tree breaks policy")
        self.emit(T_CONFLICT, {**dec.to_dict(), "run_id": self.canvas.run_id, "head_ref": self.canvas.head})
        self._not_applied(pid, digest, cs, dec)
        self.state.why_blocked[pid] = {"state": "rejected", "reason": "policy",
                                       "code": att.violations[0].code,
                                       "violations": [v.to_dict() for v in att.violations]}

    def _missing_requirements(self, pid: str, digest: str) -> bool:
        """A proposal built on a derived base needs every proposal that base
        holds on the canvas already; otherwise it is dropped, not half-applied."""
        root = pid.split(":split-")[0]
        need = [r for r in self.requires.get(root, ()) if r not in self.canvas.included]
        if not need:
            return False
        self._flush()
        cs = [{"path": "*", "hunk": None, "reason": f"requires {r}, not in the stack"} for r in need]
        dec = ConflictDecision(pid, "drop", conflict_fingerprint(pid, self.canvas.head, cs), tuple(cs),
                               "its base holds proposals that are not in the stack")
        self.emit(T_CONFLICT, {**dec.to_dict(), "run_id": self.canvas.run_id, "head_ref": self.canvas.head})
        self._not_applied(pid, digest, cs, dec)
        self.state.why_blocked[pid] = {"state": "dropped", "reason": "dependency not in stack",
                                       "requires": need}
        return True

    def _conflict_fingerprints(self, pid: str, conflicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        cp = self.checked.get(pid)
        if cp is None:
            return []
        out: list[dict[str, Any]] = []
        for c in conflicts:
            fps = [f for f in cp.fingerprints if f["path"] == c["path"]]
            hunks = [f for f in fps if f.get("kind") == "hunk"]
            if c.get("hunk") is not None and c["hunk"] < len(hunks):
                out.append(dict(hunks[c["hunk"]]))
            else:
                out.extend(dict(f) for f in fps)
        return out

    # -- guarded split ---------------------------------------------------------
    def _total_parts(self, cp: CheckedProposal, parsed: ParsedDiff) -> int:
        if cp.proposal.get("atomicity") == "hunk_ok":
            return sum(max(1, len(f.hunks)) for f in parsed.files)
        return len(parsed.files)

    def _applicable_parts(self, cp: CheckedProposal, parsed: ParsedDiff,
                          att: Attempt) -> list[tuple[str, int | None]]:
        bad_files = {c.path for c in att.conflicts if c.hunk is None}
        bad_hunks = {(c.path, c.hunk) for c in att.conflicts if c.hunk is not None}
        keep: list[tuple[str, int | None]] = []
        hunk_ok = cp.proposal.get("atomicity") == "hunk_ok"
        for fp in parsed.files:
            if fp.path in bad_files:
                continue
            if not any(p == fp.path for p, _ in bad_hunks):
                if hunk_ok and fp.hunks:
                    keep.extend((fp.path, k) for k in range(len(fp.hunks)))
                else:
                    keep.append((fp.path, None))
            elif hunk_ok:
                keep.extend((fp.path, k) for k in range(len(fp.hunks)) if (fp.path, k) not in bad_hunks)
        return keep

    def _split(self, pid: str, cp: CheckedProposal, parsed: ParsedDiff, keep: list[tuple[str, int | None]],
               dec: ConflictDecision) -> bool:
        all_parts: list[tuple[str, int | None]] = []
        for fp in parsed.files:
            if dec.split_policy == "by_hunk" and fp.hunks:
                all_parts.extend((fp.path, k) for k in range(len(fp.hunks)))
            else:
                all_parts.append((fp.path, None))
        rest = [p for p in all_parts if p not in keep]
        try:
            part_a = diffs.select(parsed, keep)
            part_b = diffs.select(parsed, rest)
        except DiffError:
            return False
        canon_a, canon_b = diffs.serialize_diff(part_a), diffs.serialize_diff(part_b)
        id_a, id_b = f"{pid}:split-a", f"{pid}:split-b"
        req = {"artifact_kind": "dome.split_request/v1", "run_id": self.canvas.run_id,
               "proposal_id": pid, "partitioning": dec.split_policy,
               "conflict_fingerprint": dec.conflict_fingerprint, "head_ref": self.canvas.head}
        self.emit(T_SPLIT_REQ, req)
        att = self.canvas.try_apply(part_a)
        if not att.clean:
            return False
        res = {"artifact_kind": "dome.split_result/v1", "run_id": self.canvas.run_id,
               "proposal_id": pid, "parent_diff_digest": cp.diff_digest,
               "partitioning": dec.split_policy,
               "proposal_id_A": id_a, "diff_digest_A": digest_bytes(canon_a),
               "keep_A": [[p, k] for p, k in keep],
               "proposal_id_B": id_b, "diff_digest_B": digest_bytes(canon_b),
               "keep_B": [[p, k] for p, k in rest],
               "provenance": {"parent_proposal_id": pid, "parent_diff_digest": cp.diff_digest,
                              "conflict_fingerprint": dec.conflict_fingerprint},
               "validation_escalated": sorted(self.policy.escalate_on_split) or ["full"]}
        self.emit(T_SPLIT_RES, res)
        self.state.derived[id_a] = res
        self.state.escalated_suites.update(self.policy.escalate_on_split)
        self._accept(id_a, res["diff_digest_A"], part_a, att, derived_from=pid)
        self._flush()
        self.state.why_blocked[pid] = {"state": "split", "applied_part": id_a, "remainder": id_b}
        rest_dec = ConflictDecision(id_b, "resolver" if self._resolver_ok(id_b) else "drop",
                                    dec.conflict_fingerprint, dec.conflicts,
                                    "remainder of a guarded split")
        self.emit(T_CONFLICT, {**rest_dec.to_dict(), "run_id": self.canvas.run_id,
                               "head_ref": self.canvas.head})
        self._not_applied(id_b, res["diff_digest_B"], list(dec.conflicts), rest_dec)
        return True

    # -- speculative validation with bisection ----------------------------------
    def current_checkpoints(self) -> list[Checkpoint]:
        seen: list[Checkpoint] = []
        for layer in self.state.layers:
            if layer.checkpoint is not None and (not seen or seen[-1] is not layer.checkpoint):
                seen.append(layer.checkpoint)
        return seen

    def validate(self, suites: Sequence[Mapping[str, Any]], validator: Validator,
                 max_ejections: int = 16) -> list[dict[str, Any]]:
        """Validate the whole stack; bisect, eject and re-validate on failure."""
        ejections = 0
        while True:
            cps = self.current_checkpoints()
            head_cp = cps[-1] if cps else self.canvas.checkpoint_by_id("cp-0000")
            reports = [self._run_suite(head_cp, s, validator, "final") for s in suites]
            failing = [s for s, r in zip(suites, reports) if r["result"] != "passed"]
            if not failing or not cps or ejections >= max_ejections:
                reports += self._judge_with_base_inputs(head_cp, suites, validator)
                self._write_held()
                return reports
            ejections += 1

            def passes(k: int) -> bool:
                cp = cps[k - 1] if k > 0 else self.canvas.checkpoint_by_id("cp-0000")
                return all(self._run_suite(cp, s, validator, "bisect")["result"] == "passed"
                           for s in failing)

            culprit_k, steps = bisect_culprit(len(cps), passes)
            culprit_cp = cps[culprit_k - 1]
            culprits = [l.proposal_id for l in self.state.layers if l.checkpoint is culprit_cp]
            self.emit(T_BISECT, {"artifact_kind": "dome.bisect/v1", "run_id": self.canvas.run_id,
                                 "failing_suites": [suite_name(s) for s in failing],
                                 "head_ref": head_cp.commit, "steps": steps,
                                 "culprit_checkpoint_id": culprit_cp.checkpoint_id,
                                 "culprit_proposal_ids": culprits})
            self._eject(culprit_cp, culprits, failing)

    def _eject(self, culprit_cp: Checkpoint, culprits: list[str],
               failing: Sequence[Mapping[str, Any]]) -> None:
        idx = next(i for i, l in enumerate(self.state.layers) if l.checkpoint is culprit_cp)
        later = [l for l in self.state.layers[idx:] if l.proposal_id not in culprits]
        self.state.layers = self.state.layers[:idx]
        self.canvas.rollback(culprit_cp.parent and self._cp_id_of(culprit_cp.parent))
        for pid in culprits:
            self.state.apply_results.pop(pid, None)
            self.state.why_blocked[pid] = {"state": "ejected", "reason": "validation failed",
                                           "failing_suites": [suite_name(s) for s in failing],
                                           "checkpoint_id": culprit_cp.checkpoint_id}
        self.emit(T_EJECT, {"artifact_kind": "dome.ejection/v1", "run_id": self.canvas.run_id,
                            "proposal_ids": culprits, "checkpoint_id": culprit_cp.checkpoint_id,
                            "rolled_back_to": self.canvas.head,
                            "reapplied": [l.proposal_id for l in later]})
        batch = 1 if self.policy.checkpoint_strategy == "per_layer" else max(1, self.policy.batch_size)
        for layer in later:
            if self._missing_requirements(layer.proposal_id, layer.diff_digest):
                continue
            parsed = layer.parsed if layer.parsed is not None else self.checked[layer.proposal_id].parsed
            att = self.canvas.try_apply(parsed)
            if att.clean:
                self._accept(layer.proposal_id, layer.diff_digest, parsed, att,
                             derived_from=layer.derived_from)
                if len(self._unflushed) >= batch:
                    self._flush()
            elif att.violations:
                self._flush()
                self._refuse(layer.proposal_id, layer.diff_digest, att)
            else:
                self._flush()
                cs = [c.to_dict() for c in att.conflicts]
                dec = ConflictDecision(layer.proposal_id, "drop",
                                       conflict_fingerprint(layer.proposal_id, self.canvas.head, cs), tuple(cs),
                                       "no longer applies after ejection")
                self.emit(T_CONFLICT, {**dec.to_dict(), "run_id": self.canvas.run_id,
                                       "head_ref": self.canvas.head})
                self._not_applied(layer.proposal_id, layer.diff_digest,
                                  [c.to_dict() for c in att.conflicts], dec)
        self._flush()
        self.canvas.publish_head()
        self._write_held()

    def _write_held(self) -> None:
        """Write the records the emitter holds (an `Emitter` batches the per-proposal ones)."""
        getattr(self.emit, "flush", lambda: None)()

    def _cp_id_of(self, commit: str) -> str:
        if commit == self.canvas.base_ref:
            return "cp-0000"
        for cp in self.canvas.checkpoints:
            if cp.commit == commit:
                return cp.checkpoint_id
        raise KeyError(commit)

    def _judge_with_base_inputs(self, head_cp: Checkpoint, suites: Sequence[Mapping[str, Any]],
                                validator: Validator) -> list[dict[str, Any]]:
        """Each suite whose inputs the head changed runs again on the head with the base's
        inputs put back (the head's added ones stay): the report names the inputs restored,
        the commit they came from and the tree it judged. It is evidence for the person
        who consents; the proposals that changed the inputs need that consent."""
        from .validation_inputs import base_inputs_tree
        out = []
        if self.base_inputs:
            self.canvas.flush_refs()  # the head's objects are read from the repository
        for s in suites:
            globs = self.base_inputs.get(suite_name(s))
            if not globs:
                continue
            tree, restored = base_inputs_tree(self.canvas.repo, head_cp.tree, self.canvas.base_ref, globs)
            if not restored:
                continue
            judged = replace(head_cp, commit=tree, tree=tree)  # a checkout reads the tree as it reads a commit
            out.append(self._run_suite(head_cp, s, validator, "base_inputs", judged=judged, extra={
                "inputs": {"from": self.canvas.base_ref, "globs": list(globs), "restored": restored,
                           "tree": tree}}))
        return out

    def _run_suite(self, cp: Checkpoint, suite: Mapping[str, Any], validator: Validator,
                   phase: str, judged: Checkpoint | None = None,
                   extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        self.canvas.flush_refs()  # suites read the checkpoint from the repository
        recorded = getattr(self.emit, "recorded", None)  # a resumed run adopts a report already recorded
        if recorded is not None:
            got = recorded(T_VALIDATION, lambda r: (r.get("checkpoint_id"), r.get("head_ref"), r.get("phase"),
                                                    r.get("suite")) == (cp.checkpoint_id, cp.commit, phase,
                                                                        suite_name(suite)))
            if got is not None:
                self.state.reports.append(got)
                return got
        report = dict(validator(judged or cp, suite), **(extra or {}))
        report.setdefault("artifact_kind", "dome.validation_report/v1")
        report.update({"run_id": self.canvas.run_id, "head_ref": cp.commit,
                       "checkpoint_id": cp.checkpoint_id,
                       "included_proposals": list(cp.included), "phase": phase,
                       "passed": report.get("result") == "passed"})
        report["report_id"] = "vr-" + digest_json(
            {k: report.get(k) for k in ("suite_digest", "head_ref", "checkpoint_id", "phase")}
            | {"n": len(self.state.reports)})[7:23]
        self.state.reports.append(report)
        self.emit(T_VALIDATION, report)
        return report
