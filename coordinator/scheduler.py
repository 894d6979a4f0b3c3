"""The torrent-like wave scheduler (pure, deterministic).

`decide(graph, state, policy, seed, wave_index)` returns the next
SchedulingDecision: which nodes to dispatch now and why. Nothing here reads
a clock, the environment or a random source: the same graph, policy, seed
and ledger state give byte-identical decisions (`canonical_json(decision)`),
which `tests/runloop/test_scheduler.py` checks by replaying a recorded
ledger.

Scores (integers, so the canonical bytes never depend on float formatting):

- blocking: transitive descendants of the node (most-blocking-first), x1000
- rarity: 1000 // (nodes sharing the node's resource key: container images,
  GPUs, resources, capabilities) (rarest-first)
- confidence: 1000 // (1 + failed attempts of the node) (prior success signals)
- risk_penalty: 0 / 250 / 500 / 900 for low / medium / high / critical risk
- total = blocking + rarity + confidence - risk_penalty

Order: total descending, then the spec's tie-breaks node_priority_group
(ascending), node_id, task_spec_digest. Each selected entry persists its
scores and tie-break fields.

Endgame duplicates are opt-in (`scheduling.endgame_max_duplicates`, default
0: with paid agents a duplicate doubles the cost of a task); a task's own
`endgame_duplicates` overrides the queue's setting for that node (turn them
on for one cheap, slow-tailed task, or off for one paid agent). When a node
allows them: when no node is ready, slots are free (idle capacity only),
and at most `endgame_threshold` unfinished nodes remain (all of them
running), the scheduler duplicates the running blockers, at most
`duplicates_allowed(policy, node)` extra attempts per node at a time and in
total (a node never gets more than max_attempts + that many attempts), and
never beyond its remaining retry budget. A node whose last attempt failed
with a deterministic error is never duplicated. The run loop accepts the
first valid result and cancels the rest (revoking their grants).

Retries: a failed attempt is retried up to the node's max_attempts, except
when its error is one that recurs on every try (DETERMINISTIC_FAILURES: a
command or intent that does not exist, parameters that clash, an output
schema the worker cannot meet): the node fails at once.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from registry.canonical import digest_json

from .runstate import RunState
from .workgraph import Graph, Node

DECISION_KIND = "dome.scheduling_decision/v1"
# error codes that the same attempt would hit again: never retried, never duplicated
DETERMINISTIC_FAILURES = frozenset({"COMMAND_NOT_FOUND", "UNKNOWN_INTENT", "INTENT_UNAVAILABLE",
                                    "INTENT_PARAMS_CLASH", "SCHEMA_VALIDATION_ERROR",
                                    # the same earlier-attempt tiles would be handed to the retry again
                                    "LITHO_TILE_RESUME_REFUSED",
                                    # the grant lacks a method the intent calls: the next grant would too
                                    "OUT_OF_PROFILE"})
# the run's retry budget (budgets.max_retries) is spent: the loop records task.abandoned with this code
RETRY_BUDGET_EXHAUSTED = "RETRY_BUDGET_EXHAUSTED"
NO_MORE_TRIES = DETERMINISTIC_FAILURES | {RETRY_BUDGET_EXHAUSTED}  # a node whose last error is one of these is failed
RISK_PENALTY = {"low": 0, "medium": 250, "high": 500, "critical": 900}


@dataclass(frozen=True)
class SchedulerPolicy:
    max_parallel: int = 4
    endgame_threshold: int = 2
    endgame_max_duplicates: int = 0  # opt-in per queue
    max_total_attempts: int | None = None

    @classmethod
    def from_work_queue(cls, scheduling: Mapping[str, Any], budgets: Mapping[str, Any],
                        *, max_parallel: int | None = None) -> "SchedulerPolicy":
        return cls(
            max_parallel=int(max_parallel or scheduling.get("max_parallel", cls.max_parallel)),
            endgame_threshold=int(scheduling.get("endgame_threshold", cls.endgame_threshold)),
            endgame_max_duplicates=int(scheduling.get("endgame_max_duplicates", cls.endgame_max_duplicates)),
            max_total_attempts=budgets.get("max_total_attempts"),
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def status_of(node: Node, ns: Any, status: Mapping[str, str]) -> str:
    """One node's status from its own state and its dependencies' statuses (pure)."""
    if ns.succeeded:
        return "succeeded"
    if ns.active:
        return "running"
    if ns.failures >= node.max_attempts or ns.last_error in NO_MORE_TRIES:
        return "failed"
    if any(status[d] in ("failed", "blocked") for d in node.dependencies):
        return "blocked"
    if all(status[d] == "succeeded" for d in node.dependencies):
        return "ready"
    return "pending"


def stranded(status: Mapping[str, str], state: Any, policy: SchedulerPolicy) -> list[str]:
    """The ready nodes that can never be dispatched: the run's attempt budget is spent (it
    comes back only through attempts a coordinator restart lost, which a ready node cannot
    wait for). The loop records them as abandoned, so the run ends instead of waiting. Pure."""
    left = attempts_left(state, policy)
    if left is None or left > 0:
        return []
    return sorted(n for n, s in status.items() if s == "ready")


def attempts_left(state: Any, policy: SchedulerPolicy) -> int | None:
    """Attempts the run's budget still allows (None: no budget). A coordinator crash costs the
    tasks nothing: attempts it lost are not spent."""
    if policy.max_total_attempts is None:
        return None
    return policy.max_total_attempts - (state.total_attempts - state.lost_attempts)


def statuses(graph: Graph, state: RunState) -> dict[str, str]:
    """Status of every node, computed in topological order (linear time)."""
    out: dict[str, str] = {}
    for nid in graph.topo_order:
        out[nid] = status_of(graph.nodes[nid], state.node(nid), out)
    return out


def duplicates_allowed(policy: SchedulerPolicy, node: Node) -> int:
    """Extra endgame attempts a node may have: its task's own setting, else the queue's."""
    return policy.endgame_max_duplicates if node.endgame_duplicates is None else node.endgame_duplicates


def duplicable(graph: Graph, state: RunState, policy: SchedulerPolicy, nid: str) -> bool:
    node, ns = graph.nodes[nid], state.node(nid)
    extra = duplicates_allowed(policy, node)
    return (extra > 0 and ns.last_error not in DETERMINISTIC_FAILURES
            and len(ns.active) < 1 + extra
            and ns.attempts < node.max_attempts + extra
            and ns.failures + len(ns.active) < node.max_attempts)


def scores(graph: Graph, state: RunState, node: Node) -> dict[str, int]:
    blocking = graph.descendants[node.node_id] * 1000
    rarity = 1000 // graph.resource_counts[node.resource_key]
    confidence = 1000 // (1 + state.node(node.node_id).failures)
    risk_penalty = RISK_PENALTY.get(node.risk_level, 0)
    return {"blocking": blocking, "rarity": rarity, "confidence": confidence,
            "risk_penalty": risk_penalty, "total": blocking + rarity + confidence - risk_penalty}


def sort_key(e: Mapping[str, Any]) -> tuple:
    tb = e["tie_break"]
    return (-e["scores"]["total"], tb["node_priority_group"], tb["node_id"], tb["task_spec_digest"])


def entry(graph: Graph, state: RunState, nid: str, kind: str) -> dict[str, Any]:
    node = graph.nodes[nid]
    return {
        "node_id": nid,
        "kind": kind,
        "attempt": state.node(nid).attempts + 1,
        "scores": scores(graph, state, node),
        "tie_break": {"node_priority_group": node.priority_group, "node_id": nid,
                      "task_spec_digest": node.task_spec_digest},
    }


def decide(graph: Graph, state: RunState, policy: SchedulerPolicy, seed: int,
           wave_index: int, *, status: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The next SchedulingDecision, or None when there is nothing to dispatch now."""
    st = dict(status) if status is not None else statuses(graph, state)
    active_total = sum(len(state.node(n).active) for n in graph.nodes)
    free = policy.max_parallel - active_total
    budget_left = attempts_left(state, policy)
    if budget_left is not None:
        free = min(free, budget_left)
    if free <= 0:
        return None
    ready = [n for n, s in st.items() if s == "ready"]
    candidates = sorted((entry(graph, state, n, "retry" if state.node(n).attempts else "first")
                         for n in ready), key=sort_key)
    selected = candidates[:free]
    endgame = False
    unfinished = [n for n, s in st.items() if s in ("ready", "pending", "running")]
    running = [n for n, s in st.items() if s == "running"]
    if not candidates and running and len(unfinished) <= policy.endgame_threshold \
            and any(duplicates_allowed(policy, graph.nodes[n]) > 0 for n in running):
        endgame = True
        dup = sorted((entry(graph, state, n, "endgame_duplicate") for n in running
                      if duplicable(graph, state, policy, n)), key=sort_key)
        selected = dup[:free]
    return build_decision(graph, state, policy, seed, wave_index, free=free, active_total=active_total,
                          selected=selected, endgame=endgame,
                          deferred=0 if endgame else len(candidates) - len(selected))


def build_decision(graph: Graph, state: RunState, policy: SchedulerPolicy, seed: int, wave_index: int, *,
                   free: int, active_total: int, selected: list[dict[str, Any]], endgame: bool,
                   deferred: int) -> dict[str, Any] | None:
    """The SchedulingDecision artifact of a pass that selected `selected` (pure); None when empty.
    `decide` and the incremental ready set (coordinator.ready_set) both end here."""
    if not selected:
        return None
    decision = {
        "artifact_kind": DECISION_KIND,
        "wave_id": f"w{wave_index:04d}",
        "determinism_seed": seed,
        "graph_digest": graph.digest,
        "policy": policy.to_json(),
        "state_basis": {"last_sequence": state.last_sequence, "total_attempts": state.total_attempts,
                        "active": active_total},
        "endgame": endgame,
        "free_slots": free,
        "selected": selected,
        "deferred_count": deferred,
        "tie_break_order": ["scores.total desc", "node_priority_group", "node_id", "task_spec_digest"],
    }
    decision["decision_id"] = digest_json(decision)
    return decision
