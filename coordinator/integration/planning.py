"""Overlap index and stack planning (pure functions over data).

Overlap (spec §7): two proposals overlap when fingerprints share a path
and their range_hints intersect (a missing range_hint is the whole file),
or when the same base_context_digest appears with a different
edit_digest. Same path + context + edit in both is the same edit
(redundancy evidence, not a conflict).

Ordering (spec §8.3): dependency/lock files late, critical path early, low
risk early, non-overlapping before overlapping, then the SelectionDecision
tie-breaks of §10: proposal_id, created_at, diff_digest.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Collection, Iterable, Mapping, Sequence

from registry.canonical import digest_json

from .policy import IntegrationPolicy, risk_level
from .proposals import REDUNDANT, Rejection, is_dependency_file

RISK_SCORE = {"low": 0, "medium": 1, "high": 2, "critical": 3}


@dataclass(frozen=True)
class Candidate:
    """What planning needs to know about one verified proposal."""

    proposal_id: str
    created_at: str
    diff_digest: str
    risk: str
    touched_files: tuple[str, ...]
    fingerprints: tuple[Mapping[str, Any], ...]
    critical: bool = False
    atomicity: str = "atomic_proposal"
    deps: bool = False
    requires: tuple[str, ...] = ()  # proposals its (derived) base already holds

    @classmethod
    def from_proposal(cls, proposal: Mapping[str, Any], fingerprints: Sequence[Mapping[str, Any]],
                      touched: Sequence[str], policy: IntegrationPolicy,
                      critical_ids: Iterable[str] = ()) -> "Candidate":
        pid = str(proposal["proposal_id"])
        crit = bool(proposal.get("critical_path")) or pid in set(critical_ids) or \
            str(proposal.get("node_id", "")) in set(critical_ids)
        return cls(proposal_id=pid, created_at=str(proposal.get("created_at", "")),
                   diff_digest=str(proposal["diff_digest"]),
                   risk=risk_level(proposal.get("risk")), touched_files=tuple(sorted(touched)),
                   fingerprints=tuple(fingerprints), critical=crit,
                   atomicity=str(proposal.get("atomicity", "atomic_proposal")),
                   deps=any(is_dependency_file(p, policy) for p in touched),
                   requires=tuple(str(x) for x in proposal.get("_requires", ())))

    @property
    def tie_break(self) -> tuple[str, str, str]:
        return (self.proposal_id, self.created_at, self.diff_digest)


@dataclass(frozen=True)
class Overlap:
    a: str
    b: str
    path: str
    kind: str  # "range" | "context" | "file"
    fingerprint: str  # conflict_fingerprint: digest over the pair, order-free

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "path": self.path, "kind": self.kind,
                "conflict_fingerprint": self.fingerprint}


def _ranges_intersect(r1: Mapping[str, int] | None, r2: Mapping[str, int] | None) -> bool:
    if r1 is None or r2 is None:
        return True
    return r1["start"] <= r2["end"] and r2["start"] <= r1["end"]


def _fp_key(fp: Mapping[str, Any]) -> tuple[str, str, str]:
    return (fp["path"], fp["base_context_digest"], fp["edit_digest"])


class OverlapIndex:
    """File and hunk level overlap between candidates."""

    def __init__(self, candidates: Iterable[Candidate]) -> None:
        self.candidates = {c.proposal_id: c for c in candidates}
        self.by_path: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
        self.by_context: dict[tuple[str, str], list[tuple[str, Mapping[str, Any]]]] = {}
        for c in self.candidates.values():
            for fp in c.fingerprints:
                self.by_path.setdefault(fp["path"], []).append((c.proposal_id, fp))
                self.by_context.setdefault((fp["path"], fp["base_context_digest"]), []).append(
                    (c.proposal_id, fp))
        self.edges: dict[tuple[str, str], list[Overlap]] = {}
        self._adj: dict[str, set[str]] = {}
        self.same_edits: dict[tuple[str, str], int] = {}
        for path, items in self.by_path.items():
            for (pa, fa), (pb, fb) in itertools.combinations(items, 2):
                if pa == pb:
                    continue
                if _fp_key(fa) == _fp_key(fb):
                    self.same_edits[tuple(sorted((pa, pb)))] = self.same_edits.get(
                        tuple(sorted((pa, pb))), 0) + 1  # type: ignore[index]
                    continue
                if _ranges_intersect(fa.get("range_hint"), fb.get("range_hint")):
                    self._add(pa, pb, path, "range", fa, fb)
        for ctx, items in self.by_context.items():
            for (pa, fa), (pb, fb) in itertools.combinations(items, 2):
                if pa != pb and fa["edit_digest"] != fb["edit_digest"]:
                    self._add(pa, pb, fa["path"], "context", fa, fb)

    def _add(self, pa: str, pb: str, path: str, kind: str, fa: Mapping[str, Any],
             fb: Mapping[str, Any]) -> None:
        a, b = sorted((pa, pb))
        fpr = digest_json(sorted([list(_fp_key(fa)), list(_fp_key(fb))]))
        edges = self.edges.setdefault((a, b), [])
        self._adj.setdefault(a, set()).add(b)
        self._adj.setdefault(b, set()).add(a)
        if not any(e.path == path and e.fingerprint == fpr for e in edges):
            edges.append(Overlap(a, b, path, kind, fpr))

    def overlaps(self, a: str, b: str) -> list[Overlap]:
        return self.edges.get(tuple(sorted((a, b))), [])  # type: ignore[arg-type]

    def neighbours(self, pid: str) -> list[str]:
        return sorted(self._adj.get(pid, ()))

    def degree(self, pid: str) -> int:
        return len(self._adj.get(pid, ()))

    def to_dict(self) -> dict[str, Any]:
        return {"edges": [e.to_dict() for k in sorted(self.edges) for e in self.edges[k]],
                "files": {p: sorted({pid for pid, _ in items}) for p, items in sorted(self.by_path.items())
                          if len({pid for pid, _ in items}) > 1}}


@dataclass(frozen=True)
class StackPlan:
    stack_plan_id: str
    base_ref: str
    ordered: tuple[str, ...]
    ordered_entries: tuple[Mapping[str, Any], ...]
    rejected: tuple[Mapping[str, Any], ...]
    checkpoint_strategy: str
    expected_validations: tuple[str, ...]
    seed: int
    selection_scores: tuple[Mapping[str, Any], ...]
    selection_entries: tuple[Mapping[str, Any], ...]
    overlap: Mapping[str, Any]
    policy_version: str
    revision: int = 1
    supersedes: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {
            "artifact_kind": "dome.stack_plan/v1",
            "stack_plan_id": self.stack_plan_id,
            "revision": self.revision,
            "base_ref": self.base_ref,
            "ordered_proposals": [dict(e) for e in self.ordered_entries],
            "rejected": [dict(r) for r in self.rejected],
            "checkpoint_strategy": self.checkpoint_strategy,
            "expected_validations": list(self.expected_validations),
            "determinism_seed": self.seed,
            "selection_scores": [dict(s) for s in self.selection_scores],
            "overlap": dict(self.overlap),
            "policy_version": self.policy_version,
        }
        if self.supersedes:
            out["supersedes"] = self.supersedes
        return out

    def selection_decision(self) -> dict[str, Any]:
        return {"artifact_kind": "dome.selection_decision/v1",
                "decision_id": "sel-" + self.stack_plan_id[3:],
                "stack_plan_id": self.stack_plan_id, "determinism_seed": self.seed,
                "entries": [dict(e) for e in self.selection_entries],
                "tie_break_order": ["proposal_id", "created_at", "diff_digest"]}


REASON_FOR_SCHEMA = {"integrity": "invalid"}
STALE_CODES = {"PROPOSAL_WRONG_BASE", "PROPOSAL_BASE_UNKNOWN"}


def rejected_entry(pid: str, r: Rejection) -> dict[str, Any]:
    reason = "stale_base" if r.code in STALE_CODES else REASON_FOR_SCHEMA.get(r.reason, r.reason)
    return {"proposal_id": pid, "reason": reason, "code": r.code, "detail": r.message,
            "details": dict(r.details)}


def order_key(c: Candidate, index: OverlapIndex) -> tuple:
    deg = index.degree(c.proposal_id)
    return (1 if c.deps else 0, 0 if c.critical else 1, RISK_SCORE.get(c.risk, 3),
            1 if deg else 0, deg, *c.tie_break)


def _respect_requirements(ranked: list[Candidate]) -> list[Candidate]:
    """Stable topological fix-up: a proposal built on a derived base comes
    after the proposals that base holds (ranking order otherwise kept)."""
    if not any(c.requires for c in ranked):
        return ranked
    ids = {c.proposal_id for c in ranked}
    out: list[Candidate] = []
    done: set[str] = set()
    waiting = list(ranked)
    while waiting:
        progressed = False
        for c in list(waiting):
            if all(r in done or r not in ids for r in c.requires):
                out.append(c)
                done.add(c.proposal_id)
                waiting.remove(c)
                progressed = True
                break
        if not progressed:  # a cycle cannot happen (bases only hold ancestors); keep order
            out.extend(waiting)
            break
    return out


def plan_stack(candidates: Sequence[Candidate], *, base_ref: str, seed: int,
               policy: IntegrationPolicy, rejected: Sequence[tuple[str, Rejection]] = (),
               run_id: str = "", revision: int = 1, created_at: str = "",
               stacked: Collection[str] = ()) -> tuple[StackPlan, OverlapIndex]:
    """Order verified candidates, drop redundant ones, record why (pure).

    `stacked`: proposals already on the canvas from earlier in-run batches; a
    candidate whose derived base holds them is not missing a dependency."""
    index = OverlapIndex(candidates)
    ranked = _respect_requirements(sorted(candidates, key=lambda c: order_key(c, index)))
    ordered: list[str] = []
    entries: list[dict[str, Any]] = []
    rej: list[dict[str, Any]] = [rejected_entry(pid, r) for pid, r in rejected]
    sel: list[dict[str, Any]] = []
    scores: list[dict[str, Any]] = []
    n = len(ranked)
    keys_of = {c.proposal_id: {_fp_key(f) for f in c.fingerprints} for c in ranked}
    by_digest: dict[str, str] = {}
    by_key: dict[tuple[str, str, str], set[str]] = {}

    def redundant_with(c: Candidate) -> str | None:
        if c.diff_digest in by_digest:
            return by_digest[c.diff_digest]
        keys = keys_of[c.proposal_id]
        if not keys:
            return None
        holders: set[str] | None = None
        for k in keys:
            holders = set(by_key.get(k, ())) if holders is None else holders & by_key.get(k, set())
            if not holders:
                return None
        return min(holders, key=ordered.index) if holders else None

    for rank, c in enumerate(ranked):
        missing_req = [r for r in c.requires if r not in ordered and r not in stacked]
        if missing_req:
            rej.append({"proposal_id": c.proposal_id, "reason": "invalid",
                        "code": "PLAN_DEPENDENCY_MISSING",
                        "detail": "its base holds proposals that are not in the stack",
                        "details": {"requires": list(c.requires), "missing": missing_req}})
            sel.append({"proposal_id": c.proposal_id, "created_at": c.created_at or created_at,
                        "diff_digest": c.diff_digest, "accepted": False, "reason": "invalid",
                        "code": "PLAN_DEPENDENCY_MISSING"})
            continue
        key = order_key(c, index)
        comp = {"deps_late": key[0], "critical_first": key[1], "risk": key[2], "overlaps": key[4]}
        score = {"proposal_id": c.proposal_id, "score": float(n - rank), "components": comp,
                 "rank": rank}
        scores.append(score)
        dup_of = redundant_with(c)
        entry = {"proposal_id": c.proposal_id, "created_at": c.created_at or created_at,
                 "diff_digest": c.diff_digest, "score": float(n - rank)}
        if dup_of is not None:
            rej.append({"proposal_id": c.proposal_id, "reason": REDUNDANT, "code": "PLAN_REDUNDANT",
                        "detail": f"same edits as {dup_of}", "details": {"kept": dup_of}})
            sel.append({**entry, "accepted": False, "reason": REDUNDANT, "redundant_with": dup_of})
            continue
        ordered.append(c.proposal_id)
        by_digest.setdefault(c.diff_digest, c.proposal_id)
        for k in keys_of[c.proposal_id]:
            by_key.setdefault(k, set()).add(c.proposal_id)
        entries.append({"proposal_id": c.proposal_id, "diff_digest": c.diff_digest,
                        "atomicity": c.atomicity, "risk": c.risk, "position": len(entries)})
        sel.append({**entry, "accepted": True, "reason": "verified"})
    for r in rej[:len(rejected)]:
        sel.append({"proposal_id": r["proposal_id"], "created_at": created_at,
                    "diff_digest": r["details"].get("actual") if str(r["details"].get("actual", "")).startswith("sha256:") else "sha256:" + "0" * 64,
                    "accepted": False, "reason": r["reason"], "code": r["code"]})
    sel.sort(key=lambda e: (e["proposal_id"], e["created_at"], e["diff_digest"]))
    in_plan = set(ordered)
    risks = {c.risk for c in candidates if c.proposal_id in in_plan}
    plan_body = {"base_ref": base_ref, "ordered": ordered, "seed": seed, "run_id": run_id,
                 "revision": revision}
    plan = StackPlan(
        stack_plan_id="sp-" + digest_json(plan_body)[7:23],
        base_ref=base_ref, ordered=tuple(ordered), ordered_entries=tuple(entries),
        rejected=tuple(sorted(rej, key=lambda r: (r["proposal_id"], r["code"]))),
        checkpoint_strategy=policy.checkpoint_strategy,
        expected_validations=tuple(policy.required_suites(risks)),
        seed=seed, selection_scores=tuple(scores), selection_entries=tuple(sel),
        overlap=index.to_dict(), policy_version=f"{policy.name}@{policy.version}",
        revision=revision)
    return plan, index


def final_plan(plan: StackPlan, *, included: Sequence[str], digests: Mapping[str, str],
               atomicity: Mapping[str, str], not_applied: Mapping[str, Mapping[str, Any]],
               expected_validations: Sequence[str], run_id: str = "") -> StackPlan:
    """The plan as it ended: what the head holds, in order, and why each
    other proposal is not there (conflict, ejected by validation, ...)."""
    rej = [dict(r) for r in plan.rejected]
    for pid, why in sorted(not_applied.items()):
        if any(r["proposal_id"] == pid for r in rej):
            continue
        rej.append({"proposal_id": pid, "reason": "conflict" if why.get("state") != "ejected" else "policy",
                    "code": "STACK_" + str(why.get("state", "dropped")).upper(),
                    "detail": str(why.get("reason", why.get("state", ""))), "details": dict(why)})
    entries = tuple({"proposal_id": pid, "diff_digest": digests[pid],
                     "atomicity": atomicity.get(pid, "atomic_proposal"), "position": k}
                    for k, pid in enumerate(included))
    body = {"base_ref": plan.base_ref, "ordered": list(included), "seed": plan.seed,
            "run_id": run_id, "revision": plan.revision + 1}
    return StackPlan(
        stack_plan_id="sp-" + digest_json(body)[7:23], base_ref=plan.base_ref,
        ordered=tuple(included), ordered_entries=entries,
        rejected=tuple(sorted(rej, key=lambda r: (r["proposal_id"], r["code"]))),
        checkpoint_strategy=plan.checkpoint_strategy,
        expected_validations=tuple(sorted(set(expected_validations))), seed=plan.seed,
        selection_scores=plan.selection_scores, selection_entries=plan.selection_entries,
        overlap=plan.overlap, policy_version=plan.policy_version, revision=plan.revision + 1,
        supersedes=plan.stack_plan_id)


# ---------------------------------------------------------------------------
# conflict policy (pure)

POLICY_PRECEDENCE = {"reorder": 0, "split": 1, "resolver": 2, "drop": 3}


@dataclass(frozen=True)
class ConflictDecision:
    proposal_id: str
    action: str  # reorder | split | resolver | drop
    conflict_fingerprint: str
    conflicts: tuple[Mapping[str, Any], ...]
    reason: str
    split_policy: str | None = None  # by_file | by_hunk
    attempt: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {"artifact_kind": "dome.conflict_decision/v1",
                "decision_id": "cd-" + self.conflict_fingerprint[7:23] + f"-{self.action}-{self.attempt}",
                "proposal_id": self.proposal_id,
                "policy_precedence": POLICY_PRECEDENCE[self.action],
                "conflict_fingerprint": self.conflict_fingerprint,
                "action": self.action, "reason": self.reason,
                "conflicts": [dict(c) for c in self.conflicts], "split_policy": self.split_policy,
                "attempt": self.attempt,
                "tie_break": {"policy_precedence": POLICY_PRECEDENCE[self.action],
                              "proposal_id": self.proposal_id,
                              "conflict_fingerprint": self.conflict_fingerprint},
                "tie_break_order": ["policy_precedence", "proposal_id", "conflict_fingerprint"]}


def conflict_fingerprint(proposal_id: str, head_ref: str, conflicts: Sequence[Mapping[str, Any]]) -> str:
    return digest_json({"proposal_id": proposal_id, "head": head_ref,
                        "conflicts": sorted([[c["path"], -1 if c.get("hunk") is None else c["hunk"]]
                                             for c in conflicts])})


def decide_conflict(*, proposal_id: str, atomicity: str, conflicts: Sequence[Mapping[str, Any]],
                    applicable_parts: int, total_parts: int, reorders_used: int,
                    later_pending: int, policy: IntegrationPolicy, head_ref: str,
                    resolver_available: bool) -> ConflictDecision:
    """What to do with a proposal that conflicts on the head (pure).

    In order of policy precedence: reorder (retry after the rest, once, while
    something else is pending), guarded split (only with atomicity atomic_file
    or hunk_ok, when policy allows it and part of it applies), a resolver
    worker on the current head, drop."""
    fpr = conflict_fingerprint(proposal_id, head_ref, conflicts)
    cs = tuple(dict(c) for c in conflicts)
    actions = policy.conflict_actions
    if "reorder" in actions and reorders_used < policy.max_reorder_passes and later_pending > 0:
        return ConflictDecision(proposal_id, "reorder", fpr, cs,
                                "retry after the remaining proposals", attempt=reorders_used + 1)
    if ("split" in actions and atomicity in ("atomic_file", "hunk_ok")
            and atomicity in policy.allowed_atomicity and 0 < applicable_parts < total_parts):
        return ConflictDecision(proposal_id, "split", fpr, cs,
                                f"apply the {applicable_parts} non-conflicting of {total_parts} parts",
                                split_policy="by_hunk" if atomicity == "hunk_ok" else "by_file")
    if "resolver" in actions and resolver_available:
        return ConflictDecision(proposal_id, "resolver", fpr, cs,
                                "spawn a resolver worker on the current head")
    return ConflictDecision(proposal_id, "drop", fpr, cs, "conflicts with the stack; dropped")


# ---------------------------------------------------------------------------
# speculative validation: bisect (pure step function)


def bisect_culprit(n_layers: int, passes: Any) -> tuple[int, list[dict[str, Any]]]:
    """Find the first layer (1-based) whose prefix fails, given `passes(k)`
    that validates the stack prefix of k layers (k=n is known to fail, k=0
    the base is assumed good). Returns (culprit layer, steps)."""
    lo, hi = 0, n_layers  # prefix lo passes, prefix hi fails
    steps: list[dict[str, Any]] = []
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ok = bool(passes(mid))
        steps.append({"prefix": mid, "passed": ok, "lo": lo, "hi": hi})
        if ok:
            lo = mid
        else:
            hi = mid
    return hi, steps
