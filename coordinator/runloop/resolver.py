"""Resolver workers (pure): a conflict that survives reorder and split becomes a task.

The stacker records `integration.resolver_request` (the proposal, the head,
the conflicts, the conflict fingerprint). The run loop then dispatches a
resolver attempt: a grant like any worker's, its base the current
integration head, its input the dropped proposal's diff and intent. It is
recorded `resolver.spawned` (with the original proposal, the conflict
decision and the try), in the same ledger transaction as its grant and
dispatch. Its proposal is verified and stacked like any other and carries
the provenance (`resolves`). A conflict gets at most `resolver_max_tries`
resolver attempts (a try lost to a coordinator restart is not counted);
then the proposal is dropped with the reason (`integration.resolver_exhausted`).

A task may choose for itself (`on_conflict` in the work queue): `rerun` gives
each conflict of its proposal up to `rerun_max_tries` resolver attempts that
run the same command again on the head, `drop` gives none; `TryLimits` holds
the queue's default and the tasks' own bounds, keyed by the origin's node.
A try whose proposal does not land (dropped, rejected at verification or
ejected by validation) is spent like a failed one.

Everything here folds ledger records, so a replay reaches the same spawns.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from registry.canonical import digest_json

T_REQUEST = "integration.resolver_request"
T_SPAWNED = "resolver.spawned"
T_EXHAUSTED = "integration.resolver_exhausted"
T_CONFLICT = "integration.conflict_decision"
T_REJECTED = "integration.proposal_rejected"
T_EJECTED = "integration.ejected"
PATCH_SUBMITTED = "patch.submitted"
FAILED = ("task.failed", "task.timeout", "task.cancelled")
LOST = "task.lost"
COMPLETED = "task.completed"
NODE_SEP = "@resolve"


@dataclass(frozen=True)
class Attempt:
    origin: str  # the proposal whose conflict it resolves (the first one of the chain)
    request: str  # the resolver request's key
    try_no: int
    node_id: str
    ended: str | None = None  # succeeded | failed | lost
    proposal_id: str | None = None  # what it submitted (None: it found nothing to change)
    why: str | None = None  # how a failed try failed (its error code and message)


@dataclass(frozen=True)
class ResolverFacts:
    requests: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # key -> request (in order)
    decisions: Mapping[str, str] = field(default_factory=dict)  # conflict fingerprint -> decision id
    attempts: Mapping[str, Attempt] = field(default_factory=dict)  # node_execution_id -> attempt
    origin_of: Mapping[str, str] = field(default_factory=dict)  # a resolver's proposal id -> origin
    exhausted: frozenset[str] = frozenset()
    node_of: Mapping[str, str] = field(default_factory=dict)  # proposal id -> the node its patch.submitted names
    not_landed: Mapping[str, str] = field(default_factory=dict)  # proposal id -> why it did not land


@dataclass(frozen=True)
class TryLimits:
    """Resolver tries per conflict chain: the queue's `scheduling.resolver_max_tries`
    (in-run integration only) unless the chain's task set `on_conflict` itself."""

    default: int = 0
    per_node: Mapping[str, int] = field(default_factory=dict)  # graph node id -> the task's own bound

    @classmethod
    def of(cls, graph: Any, default: int) -> "TryLimits":
        return cls(default, {nid: int(n.conflict_reruns) for nid, n in graph.nodes.items()
                             if getattr(n, "conflict_reruns", None) is not None})

    def for_node(self, node_id: str | None) -> int:
        return self.per_node.get(original_node(str(node_id or "")), self.default)

    @property
    def most(self) -> int:
        return max([self.default, *self.per_node.values()])

    def reruns(self, node_id: str | None) -> bool:
        """Did this node's task ask for reruns itself (`on_conflict: rerun`)?"""
        return self.per_node.get(original_node(str(node_id or "")), 0) > 0


Limits = TryLimits | int


def limit(limits: Limits, facts: "ResolverFacts", origin_id: str) -> int:
    """The tries a chain may use: its origin proposal's node's bound."""
    return limits if isinstance(limits, int) else limits.for_node(facts.node_of.get(origin_id))


def request_key(req: Mapping[str, Any]) -> str:
    return f"{req.get('proposal_id')}|{req.get('conflict_fingerprint')}"


def origin(facts: ResolverFacts, proposal_id: str) -> str:
    """The proposal a chain of resolvers started from (a split remainder counts as its parent)."""
    pid = proposal_id.split(":split-")[0]
    seen = set()
    while pid in facts.origin_of and pid not in seen:
        seen.add(pid)
        pid = facts.origin_of[pid]
    return pid


def fold_resolvers(facts: ResolverFacts, topic: str, p: Mapping[str, Any], neid: str | None = None,
                   node_id: str | None = None) -> ResolverFacts:
    """One record applied; `neid` and `node_id` are the envelope's (the coordinator's word)."""
    if topic == T_REQUEST and p.get("proposal_id"):
        return replace(facts, requests={**facts.requests, request_key(p): dict(p)})
    if topic == T_CONFLICT and p.get("action") == "resolver":
        return replace(facts, decisions={**facts.decisions, str(p.get("conflict_fingerprint")): str(p.get("decision_id"))})
    if topic == T_CONFLICT and p.get("action") == "drop" and p.get("proposal_id"):
        return _not_landed(facts, [str(p["proposal_id"])], f"dropped: {p.get('reason') or 'conflict'}")
    if topic == T_REJECTED and p.get("proposal_id"):
        codes = ", ".join(str(r.get("code")) for r in p.get("rejections") or [] if isinstance(r, Mapping))
        return _not_landed(facts, [str(p["proposal_id"])], f"rejected at verification ({codes or 'refused'})")
    if topic == T_EJECTED:
        return _not_landed(facts, [str(x) for x in p.get("proposal_ids") or []], "ejected: validation failed")
    if topic == T_SPAWNED and p.get("node_execution_id"):
        att = Attempt(str(p["origin"]), str(p["request"]), int(p["try"]), str(p["node_id"]))
        return replace(facts, attempts={**facts.attempts, str(p["node_execution_id"]): att})
    if topic == T_EXHAUSTED and p.get("proposal_id"):
        return replace(facts, exhausted=facts.exhausted | {str(p["proposal_id"])})
    if topic == PATCH_SUBMITTED and p.get("proposal_id") and node_id:  # whose task a chain is
        facts = replace(facts, node_of={**facts.node_of, str(p["proposal_id"]): str(node_id)})
    n = neid or p.get("node_execution_id")
    if n in facts.attempts:
        att = facts.attempts[str(n)]
        if topic == PATCH_SUBMITTED and p.get("proposal_id"):
            return replace(facts, origin_of={**facts.origin_of, str(p["proposal_id"]): att.origin},
                           attempts={**facts.attempts, str(n): replace(att, proposal_id=str(p["proposal_id"]))})
        if att.ended is None and topic in (*FAILED, LOST, COMPLETED):
            ended = "lost" if topic == LOST else "failed" if topic in FAILED else (
                "succeeded" if p.get("outcome", "succeeded") == "succeeded" else "failed")
            return replace(facts, attempts={**facts.attempts, str(n): replace(att, ended=ended,
                                                                               why=_failure(topic, p, ended))})
    return facts


def _not_landed(facts: ResolverFacts, pids: list[str], why: str) -> ResolverFacts:
    """Only resolver proposals matter here (a try whose proposal did not land is spent)."""
    mine = {a.proposal_id for a in facts.attempts.values() if a.proposal_id}
    hit = {pid: why for pid in pids if pid.split(":split-")[0] in mine}
    return replace(facts, not_landed={**facts.not_landed, **hit}) if hit else facts


def _failure(topic: str, p: Mapping[str, Any], ended: str) -> str | None:
    if ended != "failed":
        return None
    err = p.get("error") if isinstance(p.get("error"), Mapping) else {}
    code = err.get("code") or {"task.timeout": "TIMEOUT", "task.cancelled": "CANCELLED"}.get(topic, "FAILED")
    msg = str(err.get("message") or p.get("reason") or "")
    return f"{code}: {msg}" if msg else str(code)


def fold_resolver_events(events: Any, facts: ResolverFacts | None = None) -> ResolverFacts:
    out = facts or ResolverFacts()
    for e in events:
        if isinstance(e, Mapping):
            out = fold_resolvers(out, e["topic"], e.get("payload") or {}, e.get("node_execution_id"),
                                 e.get("node_id"))
        else:
            out = fold_resolvers(out, e.topic, e.payload or {}, getattr(e, "node_execution_id", None),
                                 getattr(e, "node_id", None))
    return out


def tries_used(facts: ResolverFacts, origin_id: str) -> int:
    """Resolver attempts charged to a conflict chain (lost ones are not)."""
    return sum(1 for a in facts.attempts.values() if a.origin == origin_id and a.ended != "lost")


def in_flight(facts: ResolverFacts, origin_id: str) -> bool:
    return any(a.origin == origin_id and a.ended is None for a in facts.attempts.values())


def landing(facts: ResolverFacts, att: Attempt) -> bool:
    """A try that succeeded and whose proposal (if any) has not been turned away."""
    return att.ended == "succeeded" and (att.proposal_id is None or att.proposal_id not in facts.not_landed)


def available(facts: ResolverFacts, proposal_id: str, max_tries: Limits) -> bool:
    """May a conflict of this proposal go to a resolver (one more try left)?"""
    o = origin(facts, proposal_id)
    return o not in facts.exhausted and tries_used(facts, o) < limit(max_tries, facts, o)


def to_spawn(facts: ResolverFacts, max_tries: Limits) -> list[tuple[str, Mapping[str, Any], int]]:
    """(origin, request, try) for each conflict chain that needs a resolver attempt now: its
    newest request has no attempt that is landing or running, and a try is left."""
    newest: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for key, req in facts.requests.items():
        newest[origin(facts, str(req["proposal_id"]))] = (key, req)
    out = []
    for o, (key, req) in newest.items():
        if o in facts.exhausted or in_flight(facts, o):
            continue
        mine = [a for a in facts.attempts.values() if a.request == key]
        if any(landing(facts, a) for a in mine):
            continue
        used = tries_used(facts, o)
        if used < limit(max_tries, facts, o):
            out.append((o, req, used + 1))
    return sorted(out, key=lambda t: (t[0], t[2]))


def exhausted_now(facts: ResolverFacts, max_tries: Limits) -> list[tuple[str, int]]:
    """Conflict chains whose tries are spent with nothing running and no resolver proposal
    pending: (origin, tries) to record dropped."""
    out = []
    for key, req in facts.requests.items():
        o = origin(facts, str(req["proposal_id"]))
        if o in facts.exhausted or in_flight(facts, o) or any(x[0] == o for x in out):
            continue
        newest = [k for k, r in facts.requests.items() if origin(facts, str(r["proposal_id"])) == o][-1]
        if key != newest:
            continue
        mine = [a for a in facts.attempts.values() if a.request == key]
        if any(landing(facts, a) for a in mine):
            continue
        used = tries_used(facts, o)
        if used >= limit(max_tries, facts, o):
            out.append((o, used))
    return sorted(out)


def last_try(facts: ResolverFacts, origin_id: str) -> str | None:
    """How the chain's newest charged try ended, in words (None: no try was made)."""
    mine = sorted((a for a in facts.attempts.values() if a.origin == origin_id and a.ended != "lost"),
                  key=lambda a: a.try_no)
    if not mine:
        return None
    a = mine[-1]
    if a.ended == "failed":
        return f"try {a.try_no} failed ({a.why or 'failed'})"
    if a.proposal_id is not None and a.proposal_id in facts.not_landed:
        return f"try {a.try_no}'s proposal {facts.not_landed[a.proposal_id]}"
    if a.proposal_id is not None:
        return f"try {a.try_no}'s proposal conflicted again"
    return f"try {a.try_no} ended {a.ended}"


def exhausted_reason(facts: ResolverFacts, origin_id: str, tries: int, limits: Limits) -> str:
    """Why a chain is dropped: who bounded its tries, and how the last one ended."""
    node = facts.node_of.get(origin_id)
    rerun = not isinstance(limits, int) and limits.reruns(node)
    what = (f"rerun of {original_node(str(node))} on the integration head (on_conflict: rerun) tried "
            f"{tries} time(s), its rerun_max_tries" if rerun else
            f"resolver tried {tries} time(s) without a proposal that lands")
    last = last_try(facts, origin_id)
    return f"{what}: {last}" if last else what


def settled_without_change(facts: ResolverFacts) -> list[str]:
    """Conflict chains whose resolver succeeded without a proposal: the head already holds the intent."""
    return sorted({a.origin for a in facts.attempts.values() if a.ended == "succeeded" and a.proposal_id is None})


def resolver_node_id(node_id: str, try_no: int) -> str:
    return f"{node_id}{NODE_SEP}{try_no}"


def with_resolver_nodes(task_meta: Mapping[str, Mapping[str, Any]], max_tries: int) -> dict[str, Any]:
    """Each task's risk and atomicity also for its resolver nodes: a resolver's proposal is judged
    as its original task's (a resolver cannot carry work past the task's risk floor or gate)."""
    return {**task_meta, **{resolver_node_id(n, k): m for n, m in task_meta.items() for k in range(1, max_tries + 1)}}


def original_node(node_id: str) -> str:
    return node_id.split(NODE_SEP)[0]


def resolver_action(action_spec: Mapping[str, Any], resolver_input: Mapping[str, Any]) -> dict[str, Any]:
    """The original task's action with the resolver's input under params.resolver."""
    out = dict(action_spec)
    out["params"] = {**dict(action_spec.get("params") or {}), "resolver": dict(resolver_input)}
    return out


def resolver_input(req: Mapping[str, Any], *, origin_id: str, decision_id: str | None, diff: str,
                   intent: Mapping[str, Any], head_ref: str, try_no: int) -> dict[str, Any]:
    return {"proposal_id": str(req["proposal_id"]), "origin_proposal_id": origin_id,
            "conflict_decision": decision_id, "conflict_fingerprint": req.get("conflict_fingerprint"),
            "conflicts": [{"path": c.get("path"), "hunk": c.get("hunk")} for c in req.get("conflicts", [])],
            "request_head_ref": req.get("head_ref"), "head_ref": head_ref, "try": try_no,
            "diff_digest": req.get("diff_digest"), "diff": diff, "intent": dict(intent)}


def task_spec_digest(original_digest: str, inp: Mapping[str, Any]) -> str:
    return digest_json({"task": original_digest, "resolver": {k: v for k, v in inp.items() if k != "diff"}})
