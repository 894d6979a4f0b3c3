"""The task graph of a work queue (pure): nodes, dependencies, annotated cycles.

`build_graph(tasks, scheduling)` checks the graph rules together, so one error
lists every offending id: duplicate node ids, unknown dependencies,
self-dependencies, and cycles. A cycle is legal only when a `cycles[]`
annotation names exactly the members of its strongly connected component
with a bounded `max_iterations`: every member carries
`"cycle": {"group": G, "max_iterations": N}` with the same G and N, and the
group is exactly the strongly connected component. Such a cycle is unrolled
into N rounds (node ids `<id>@<round>`; a clash with a declared id is an error), so everything after loading
(scheduler, ledger, resume) works on a plain DAG.

Unrolling rule: inside an annotated cycle, members are ordered as listed in
the work queue. A dependency on an earlier-listed member is a forward edge
(same round); a dependency on the same or a later-listed member is a
feedback edge (previous round; dropped in round 1). Outside nodes that
depend on a member depend on its last round.
"""
from __future__ import annotations

import heapq
import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from registry.canonical import digest_json
from registry.errors import DomeError

ROUND_SEP = "@"
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_MAX_ATTEMPTS = 3


class WorkQueueError(DomeError):
    """A work queue that cannot be loaded (its graph problems are WorkQueueGraphError)."""

    code = "WORK_QUEUE_INVALID"


class OnConflictInvalid(WorkQueueError):
    """A task's `on_conflict` / `rerun_max_tries` that cannot work (`details.tasks` names each)."""

    code = "ON_CONFLICT_INVALID"


class WorkQueueGraphError(WorkQueueError):
    """Graph rules failed. `details.problems` lists every offending id by kind."""

    code = "WORK_QUEUE_GRAPH_INVALID"


@dataclass(frozen=True)
class Node:
    node_id: str
    source_id: str
    round: int | None
    dependencies: tuple[str, ...]
    task: Mapping[str, Any]
    task_spec_digest: str
    priority_group: int
    risk_level: str
    resource_key: str
    max_attempts: int
    timeout_s: float
    endgame_duplicates: int | None = None  # the task's own endgame_duplicates; None: the queue's setting
    conflict_reruns: int | None = None  # on_conflict: rerun -> its tries, drop -> 0; None: the queue's setting

    @property
    def action_spec(self) -> Mapping[str, Any]:
        return self.task["action_spec"]


@dataclass(frozen=True)
class Graph:
    nodes: Mapping[str, Node]
    topo_order: tuple[str, ...]
    dependents: Mapping[str, tuple[str, ...]]
    descendants: Mapping[str, int]
    resource_counts: Mapping[str, int]
    digest: str

    def __len__(self) -> int:
        return len(self.nodes)


def _risk_level(task: Mapping[str, Any]) -> str:
    return task.get("risk", "low")


def _resource_key(task: Mapping[str, Any]) -> str:
    images = sorted(task.get("containers", []))
    caps = sorted(task.get("required_capabilities", []))
    return json.dumps([images, caps], separators=(",", ":"))


def _sccs(ids: list[str], deps: Mapping[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative, deterministic (ids visited in sorted order)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in ids:
        if root in index:
            continue
        work = [(root, iter(sorted(set(deps[root]))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(set(deps[w])))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def _cycle_groups(tasks: list[Mapping[str, Any]], problem) -> list[dict[str, Any]]:
    groups: dict[str, dict[str, Any]] = {}
    for t in tasks:
        c = t.get("cycle")
        if not c:
            continue
        g = groups.setdefault(c["group"], {"group": c["group"], "nodes": [], "max_iterations": set()})
        if t["node_id"] not in g["nodes"]:
            g["nodes"].append(t["node_id"])
        g["max_iterations"].add(int(c["max_iterations"]))
    out = []
    for name in sorted(groups):
        g = groups[name]
        if len(g["max_iterations"]) != 1:
            problem("inconsistent_cycle_groups", name)
            continue
        out.append({"group": name, "nodes": g["nodes"], "max_iterations": g["max_iterations"].pop()})
    return out


class _Problems:
    """Every graph problem found, by kind, each item once (in the order found)."""

    CODES = {"duplicate_node_ids": "DUPLICATE_NODE_ID", "unknown_dependencies": "UNKNOWN_DEPENDENCY",
             "self_dependencies": "SELF_DEPENDENCY", "cycles": "DEPENDENCY_CYCLE",
             "inconsistent_cycle_groups": "WORK_QUEUE_GRAPH_INVALID"}

    def __init__(self) -> None:
        self.found: dict[str, list[Any]] = {}

    def __call__(self, kind: str, item: Any) -> None:
        items = self.found.setdefault(kind, [])
        if item not in items:
            items.append(item)

    def raise_any(self) -> None:
        """One WorkQueueGraphError naming every problem; its code is the kind's when there is one kind."""
        if not self.found:
            return
        kinds = sorted(self.found)
        code = self.CODES.get(kinds[0], "WORK_QUEUE_GRAPH_INVALID") if len(kinds) == 1 \
            else "WORK_QUEUE_GRAPH_INVALID"
        summary = "; ".join(f"{k}: {json.dumps(self.found[k])}" for k in kinds)
        raise WorkQueueGraphError(
            f"work queue graph is invalid: {summary}", code=code, details={"problems": self.found},
            hints=["a cycle is allowed only with every member annotated "
                   "\"cycle\": {\"group\": ..., \"max_iterations\": N}"],
        )


def _index(tasks: list[Mapping[str, Any]], problem: Callable[[str, Any], None]) -> dict[str, Mapping[str, Any]]:
    by_id: dict[str, Mapping[str, Any]] = {}
    for t in tasks:
        nid = t["node_id"]
        if nid in by_id:
            problem("duplicate_node_ids", nid)
        else:
            by_id[nid] = t
    return by_id


def _dependencies(by_id: Mapping[str, Mapping[str, Any]],
                  problem: Callable[[str, Any], None]) -> dict[str, list[str]]:
    deps: dict[str, list[str]] = {}
    for nid, t in by_id.items():
        deps[nid] = []
        for d in t.get("dependencies", []):
            if d not in by_id:
                problem("unknown_dependencies", {"node_id": nid, "dependency": d})
            else:
                deps[nid].append(d)
    return deps


def _annotated_cycles(by_id: Mapping[str, Mapping[str, Any]], deps: Mapping[str, list[str]],
                      problem: Callable[[str, Any], None]) -> dict[str, tuple[list[str], int]]:
    """Each member of an annotated cycle -> (its group's members in queue order, rounds).
    A cycle nobody annotated, and an annotation that is no cycle, are problems."""
    annotated = {frozenset(c["nodes"]): c for c in _cycle_groups(list(by_id.values()), problem)}
    used: set[frozenset[str]] = set()
    for comp in _sccs(sorted(by_id), deps):
        if len(comp) == 1 and comp[0] not in deps[comp[0]]:
            continue
        key = frozenset(comp)
        if key in annotated:
            used.add(key)
        elif len(comp) == 1:
            problem("self_dependencies", comp[0])
        else:
            problem("cycles", comp)
    for key, c in annotated.items():
        if key not in used:
            problem("annotated_cycles_not_found", c["group"])
    member_of: dict[str, tuple[list[str], int]] = {}
    for key in used:
        order = list(annotated[key]["nodes"])
        for m in order:
            member_of[m] = (order, int(annotated[key]["max_iterations"]))
    return member_of


def _node(nid: str, src: Mapping[str, Any], rnd: int | None, ndeps: list[str],
          budgets: Mapping[str, Any]) -> Node:
    digest_src = dict(src) if rnd is None else {**src, "_round": rnd}
    return Node(
        node_id=nid, source_id=src["node_id"], round=rnd,
        dependencies=tuple(sorted(set(ndeps))), task=src,
        task_spec_digest=digest_json(digest_src),
        priority_group=int(src.get("priority_group", 0)),
        risk_level=_risk_level(src), resource_key=_resource_key(src),
        max_attempts=int(src.get("max_attempts", int(budgets.get("default_max_attempts", DEFAULT_MAX_ATTEMPTS)))),
        timeout_s=float(src.get("timeout_s", float(budgets.get("default_timeout_s", DEFAULT_TIMEOUT_S)))),
        endgame_duplicates=(int(src["endgame_duplicates"]) if src.get("endgame_duplicates") is not None
                            else None),
        conflict_reruns=conflict_reruns(src),
    )


RERUN_INTENTS = frozenset({"command"})  # a rerun re-runs the same program on the head


def conflict_reruns(task: Mapping[str, Any]) -> int | None:
    """The reruns a conflict of this task's proposal may get: `on_conflict: rerun` -> its
    `rerun_max_tries` (default 1), `drop` -> 0, absent -> None (the queue decides)."""
    mode = task.get("on_conflict")
    if mode is None:
        return None
    return int(task.get("rerun_max_tries", 1)) if mode == "rerun" else 0


def on_conflict_problems(tasks: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each task whose conflict setting cannot work, with why (pure)."""
    out = []
    for t in tasks:
        mode, intent = t.get("on_conflict"), (t.get("action_spec") or {}).get("intent")
        if mode == "rerun" and intent not in RERUN_INTENTS:
            out.append({"node_id": t.get("node_id"), "on_conflict": mode, "intent": intent,
                        "problem": f"a rerun runs the task's command again; intent {intent!r} is not a command"})
        elif "rerun_max_tries" in t and mode != "rerun":
            out.append({"node_id": t.get("node_id"), "on_conflict": mode,
                        "rerun_max_tries": t["rerun_max_tries"],
                        "problem": "rerun_max_tries bounds reruns, and the task does not ask for them "
                                   "(on_conflict is not \"rerun\")"})
    return out


def check_on_conflict(tasks: list[Mapping[str, Any]]) -> None:
    """Raise OnConflictInvalid naming every task whose conflict setting cannot work."""
    bad = on_conflict_problems(tasks)
    if bad:
        raise OnConflictInvalid(
            f"task {bad[0]['node_id']!r}: {bad[0]['problem']}", details={"tasks": bad},
            hints=["on_conflict \"rerun\" is for command tasks; other intents take \"drop\" or the "
                   "queue's scheduling.resolver_max_tries",
                   "give rerun_max_tries only together with \"on_conflict\": \"rerun\""])


def _round_dependencies(nid: str, r: int, deps: list[str], member_of: Mapping[str, tuple[list[str], int]]) -> list[str]:
    """The dependencies of round r of cycle member nid (see the unrolling rule above)."""
    order = member_of[nid][0]
    pos = order.index(nid)
    out: list[str] = []
    for d in deps:
        if d in member_of and member_of[d][0] is order:
            if order.index(d) < pos:
                out.append(f"{d}{ROUND_SEP}{r}")
            elif r > 1:
                out.append(f"{d}{ROUND_SEP}{r - 1}")
        else:
            out.append(_last_round(d, member_of))
    return out


def _last_round(nid: str, member_of: Mapping[str, tuple[list[str], int]]) -> str:
    return f"{nid}{ROUND_SEP}{member_of[nid][1]}" if nid in member_of else nid


def _unroll(by_id: Mapping[str, Mapping[str, Any]], deps: Mapping[str, list[str]],
            member_of: Mapping[str, tuple[list[str], int]], budgets: Mapping[str, Any]) -> dict[str, Node]:
    """The plain DAG: every node once, every annotated cycle member once per round."""
    nodes: dict[str, Node] = {}

    def add(node: Node) -> None:
        if node.node_id in nodes:
            raise WorkQueueGraphError(f"unrolled cycle id {node.node_id!r} clashes with a declared node id",
                                      code="WORK_QUEUE_GRAPH_INVALID",
                                      details={"problems": {"unrolled_id_clashes": [node.node_id]}})
        nodes[node.node_id] = node

    for nid in sorted(by_id):
        if nid not in member_of:
            add(_node(nid, by_id[nid], None, [_last_round(d, member_of) for d in deps[nid]], budgets))
            continue
        for r in range(1, member_of[nid][1] + 1):
            add(_node(f"{nid}{ROUND_SEP}{r}", by_id[nid], r, _round_dependencies(nid, r, deps[nid], member_of),
                      budgets))
    return nodes


def build_graph(tasks: list[Mapping[str, Any]], scheduling: Mapping[str, Any] | None = None) -> Graph:
    """The task graph of a work queue: every graph problem at once, else the unrolled DAG."""
    problems = _Problems()
    by_id = _index(tasks, problems)
    deps = _dependencies(by_id, problems)
    member_of = _annotated_cycles(by_id, deps, problems)
    problems.raise_any()
    check_on_conflict(tasks)
    return finish_graph(_unroll(by_id, deps, member_of, scheduling or {}))


def finish_graph(nodes: Mapping[str, Node]) -> Graph:
    ordered = dict(sorted(nodes.items()))
    dependents: dict[str, list[str]] = {n: [] for n in ordered}
    for node in ordered.values():
        for d in node.dependencies:
            dependents[d].append(node.node_id)
    # Kahn with a sorted frontier: a deterministic topological order
    indeg = {n: len(ordered[n].dependencies) for n in ordered}
    frontier = [n for n, k in indeg.items() if k == 0]
    heapq.heapify(frontier)
    topo: list[str] = []
    while frontier:
        n = heapq.heappop(frontier)
        topo.append(n)
        for m in dependents[n]:
            indeg[m] -= 1
            if indeg[m] == 0:
                heapq.heappush(frontier, m)
    if len(topo) != len(ordered):  # pragma: no cover - build_graph rejects cycles first
        raise WorkQueueGraphError("graph has a cycle after unrolling")
    # transitive descendants count, by bitsets in reverse topological order
    bit = {n: 1 << i for i, n in enumerate(topo)}
    reach: dict[str, int] = {}
    for n in reversed(topo):
        acc = 0
        for m in dependents[n]:
            acc |= bit[m] | reach[m]
        reach[n] = acc
    descendants = {n: bin(reach[n]).count("1") for n in ordered}
    resource_counts: dict[str, int] = {}
    for node in ordered.values():
        resource_counts[node.resource_key] = resource_counts.get(node.resource_key, 0) + 1
    digest = digest_json([[x.node_id, list(x.dependencies), x.task_spec_digest] for x in ordered.values()])
    return Graph(nodes=ordered, topo_order=tuple(topo),
                 dependents={k: tuple(sorted(v)) for k, v in dependents.items()},
                 descendants=descendants, resource_counts=resource_counts, digest=digest)
