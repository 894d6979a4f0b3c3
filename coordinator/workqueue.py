"""Load and validate work queues (dome.work.queue/v1) into a task graph.

Pure: `parse_work_queue(obj)` takes the JSON value and returns a WorkQueue
or raises a typed error. The schema (registry/schemas/work_queue.json) is
closed; on top of it the graph rules are checked together so one error
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

import json
import math
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from registry.canonical import digest_json
from registry.errors import DomeError, SchemaValidationError
from registry.schema_store import validate

ARTIFACT_KIND = "dome.work.queue/v1"
ROUND_SEP = "@"
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_MAX_ATTEMPTS = 3


class WorkQueueError(DomeError):
    code = "WORK_QUEUE_INVALID"


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


@dataclass(frozen=True)
class WorkQueue:
    raw: Mapping[str, Any]
    digest: str
    graph: Graph
    repo: str
    base_ref: str
    seed: int
    policy: str
    promote_to: str | None
    budgets: Mapping[str, Any] = field(default_factory=dict)
    scheduling: Mapping[str, Any] = field(default_factory=dict)
    limits: Mapping[str, Any] = field(default_factory=dict)
    validations: tuple[Mapping[str, Any], ...] = ()
    if_target_moved: str = "refuse"


MAX_BYTES = 16 * 1024 * 1024  # a work queue is a plan, not data
MAX_DEPTH = 64  # nesting of arrays/objects a work queue may use; deeper is refused, never recursed into
BRANCH_PREFIX = "refs/heads/"
TARGET_MOVED = ("refuse", "stack")  # `if_target_moved`: what pre-flight does when promote_to moved past the base


class WorkQueueUnknownField(WorkQueueError, SchemaValidationError):
    """A field the closed schema does not define (named, with a did-you-mean)."""

    code = "WORK_QUEUE_UNKNOWN_FIELD"


def load_work_queue(path: Path | str) -> WorkQueue:
    """Read, decode and parse a work queue file; every failure is a WorkQueueError."""
    path = Path(path)
    if path.is_dir():
        raise WorkQueueError(f"work queue path is a directory: {path}", code="WORK_QUEUE_IS_DIRECTORY",
                             details={"path": str(path)}, hints=["give the path of the .json file itself"])
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):  # a FIFO or a device would block or never end
            raise WorkQueueError(f"work queue is not a regular file: {path}", code="WORK_QUEUE_NOT_A_FILE",
                                 details={"path": str(path)})
        if st.st_size > MAX_BYTES:
            raise WorkQueueError(f"work queue is {st.st_size} bytes; at most {MAX_BYTES} are read",
                                 code="WORK_QUEUE_TOO_LARGE", details={"path": str(path), "max_bytes": MAX_BYTES})
        data = path.read_bytes()
    except FileNotFoundError:
        raise WorkQueueError(f"work queue not found: {path}", code="WORK_QUEUE_NOT_FOUND",
                             details={"path": str(path)}) from None
    except OSError as exc:
        raise WorkQueueError(f"work queue cannot be read: {exc.strerror}", code="WORK_QUEUE_UNREADABLE",
                             details={"path": str(path)}) from None
    return parse_work_queue(decode_json(data, source=str(path)))


def _no_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not a JSON number", code="WORK_QUEUE_NOT_FINITE", details={"value": name},
                   hints=["use a finite number (timeouts and limits must be finite)"])


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        _no_constant(text)
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _NotJson(f"duplicate key {k!r} in one JSON object", code="WORK_QUEUE_DUPLICATE_KEY",
                           details={"key": k}, hints=["a key may appear once per object; JSON readers "
                                                      "disagree on which copy wins"])
        out[k] = v
    return out


class _NotJson(WorkQueueError):
    code = "WORK_QUEUE_NOT_JSON"


def decode_json(data: bytes, *, source: str = "<input>") -> Any:
    """Strict JSON: UTF-8 only, no duplicate keys, no NaN/Infinity, bounded nesting."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkQueueError(f"work queue is not UTF-8 (byte {exc.start}: {data[exc.start:exc.start + 1]!r})",
                             code="WORK_QUEUE_NOT_UTF8", details={"path": source, "offset": exc.start}) from None
    depth = _max_depth_text(text)
    if depth > MAX_DEPTH:
        raise _too_deep(depth, source)
    try:
        obj = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant,
                         parse_float=_finite_float)
    except _NotJson as exc:
        exc.details.setdefault("path", source)
        raise
    except json.JSONDecodeError as exc:
        raise WorkQueueError(f"work queue is not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
                             code="WORK_QUEUE_NOT_JSON",
                             details={"path": source, "line": exc.lineno, "column": exc.colno}) from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer with more digits than Python converts
        raise WorkQueueError(f"work queue is not usable JSON: {exc}", code="WORK_QUEUE_NOT_JSON",
                             details={"path": source}) from None
    return obj


def _too_deep(depth: int, source: str) -> WorkQueueError:
    return WorkQueueError(f"work queue nests {depth} levels deep; at most {MAX_DEPTH} are allowed",
                          code="WORK_QUEUE_TOO_DEEP", details={"path": source, "max_depth": MAX_DEPTH})


def _max_depth_text(text: str) -> int:
    """Deepest bracket nesting outside strings, found without parsing (no recursion)."""
    depth = best = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            best = max(best, depth)
        elif ch in "]}":
            depth -= 1
    return best


def _check_values(obj: Any) -> None:
    """Depth and finiteness of an already-parsed value (queues that come from
    elsewhere than a file, e.g. the MCP front door), iteratively."""
    stack: list[tuple[Any, int, str]] = [(obj, 1, "")]
    while stack:
        v, depth, where = stack.pop()
        if isinstance(v, (dict, list)) and depth > MAX_DEPTH:
            raise _too_deep(depth, "<value>")
        if isinstance(v, dict):
            stack.extend((x, depth + 1, f"{where}/{k}") for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((x, depth + 1, f"{where}/{i}") for i, x in enumerate(v))
        elif isinstance(v, float) and not math.isfinite(v):
            raise WorkQueueError(f"{where or '/'}: {v} is not a finite number", code="WORK_QUEUE_NOT_FINITE",
                                 details={"field": where}, hints=["use a finite number"])


def branch_ref_problem(ref: str) -> str | None:
    """Why `ref` is not a branch ref dome may promote to (git check-ref-format
    rules, under refs/heads/), or None."""
    if not ref.startswith(BRANCH_PREFIX) or len(ref) == len(BRANCH_PREFIX):
        return "promote_to must be a branch ref, refs/heads/<name>"
    if ref.endswith("/") or ref.endswith(".") or "//" in ref:
        return "a ref may not end with '/' or '.', nor contain '//'"
    if ".." in ref or "@{" in ref or ref == "@":
        return "a ref may not contain '..' or '@{'"
    if any(ord(c) < 0x20 or c == "\x7f" or c in " ~^:?*[\\" for c in ref):
        return "a ref may not contain spaces, control characters or any of ~^:?*[\\"
    for part in ref.split("/"):
        if part.startswith(".") or part.endswith(".lock"):
            return "no part of a ref may start with '.' or end with '.lock'"
    return None


def _unknown_fields(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Fields the closed schema does not define, each with where it is and the closest known name."""
    import difflib

    from registry.schema_store import validator

    found: list[dict[str, Any]] = []
    pending = list(validator("work_queue").iter_errors(obj))
    while pending:
        err = pending.pop()
        pending.extend(err.context or ())
        if err.validator != "additionalProperties" or not isinstance(err.instance, dict):
            continue
        known = set((err.schema.get("properties") or {}))
        patterns = list((err.schema.get("patternProperties") or {}))
        for name in sorted(set(err.instance) - known):
            if any(re.search(p, name) for p in patterns):
                continue
            where = "/" + "/".join(str(p) for p in err.absolute_path)
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
            item = {"field": name, "at": where, "did_you_mean": close[0] if close else None}
            if item not in found:
                found.append(item)
    return sorted(found, key=lambda f: (f["at"], f["field"]))


def parse_work_queue(obj: Any) -> WorkQueue:
    if not isinstance(obj, dict):
        raise WorkQueueError("a work queue is a JSON object", details={"type": type(obj).__name__})
    _check_values(obj)
    unknown = _unknown_fields(obj)
    if unknown:
        first = unknown[0]
        mean = f"; did you mean {first['did_you_mean']!r}?" if first["did_you_mean"] else ""
        raise WorkQueueUnknownField(
            f"unknown field {first['field']!r} at {first['at']}{mean}", details={"unknown_fields": unknown},
            hints=[f"{f['at']}: {f['field']!r} -> {f['did_you_mean']!r}" for f in unknown if f["did_you_mean"]]
            or ["remove fields the schema does not define"])
    validate("work_queue", obj)  # SchemaValidationError lists every schema problem
    problem = branch_ref_problem(obj["promote_to"])
    if problem:
        raise WorkQueueError(f"promote_to {obj['promote_to']!r} is refused: {problem}", code="PROMOTE_TO_INVALID",
                             details={"promote_to": obj["promote_to"]},
                             hints=["name a branch, e.g. \"refs/heads/dome/results\""])
    _check_names(obj)
    graph = build_graph(obj["tasks"], obj.get("scheduling", {}))
    return WorkQueue(
        raw=obj,
        digest=digest_json(obj),
        graph=graph,
        repo=obj["repo"],
        base_ref=obj["base_ref"],
        seed=int(obj["determinism_seed"]),
        policy=obj["policy"],
        promote_to=obj.get("promote_to"),
        budgets=dict(obj.get("budgets", {})),
        limits=dict(obj.get("limits", {})),
        scheduling=dict(obj.get("scheduling", {})),
        validations=tuple(obj.get("validations", [])),
        if_target_moved=str(obj.get("if_target_moved", "refuse")),
    )


def _check_names(obj: Mapping[str, Any]) -> None:
    """Every intent and validation suite is one the worker knows (registry.intents)."""
    import difflib

    from registry.intents import INTENTS, SUITES

    for kind, table, items in (("intent", INTENTS, [(f"/tasks/{i}/action_spec/intent", t["action_spec"]["intent"])
                                                    for i, t in enumerate(obj["tasks"])]),
                               ("suite", SUITES, [(f"/validations/{i}/suite", v["suite"])
                                                  for i, v in enumerate(obj.get("validations", []))])):
        bad = [(where, name) for where, name in items if name not in table]
        if bad:
            where, name = bad[0]
            close = difflib.get_close_matches(name, sorted(table), n=1, cutoff=0.6)
            raise WorkQueueError(
                f"unknown {kind} {name!r} at {where}" + (f"; did you mean {close[0]!r}?" if close else ""),
                code=f"UNKNOWN_{kind.upper()}", details={"unknown": [{"at": w, "name": n} for w, n in bad],
                                                         "known": sorted(table)},
                hints=[f"known {kind}s: {', '.join(sorted(table))}"])
    from registry.agent_card import RuntimeCardInvalid, check_card

    for i, t in enumerate(obj["tasks"]):  # an agent's runtime card becomes its grant: check it before any work
        if t["action_spec"]["intent"] == "agent":
            a = t["action_spec"]
            try:
                check_card((a.get("params") or {}).get("card") or a.get("card"))
            except RuntimeCardInvalid as exc:
                raise WorkQueueError(f"/tasks/{i}/action_spec: {exc.message}", code=exc.code,
                                     details={"at": f"/tasks/{i}/action_spec", **exc.details}) from None


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


def build_graph(tasks: list[Mapping[str, Any]], scheduling: Mapping[str, Any] | None = None) -> Graph:
    budgets = scheduling or {}
    problems: dict[str, list[Any]] = {}

    def problem(kind: str, item: Any) -> None:
        problems.setdefault(kind, [])
        if item not in problems[kind]:
            problems[kind].append(item)

    by_id: dict[str, Mapping[str, Any]] = {}
    for t in tasks:
        nid = t["node_id"]
        if nid in by_id:
            problem("duplicate_node_ids", nid)
        else:
            by_id[nid] = t
    deps: dict[str, list[str]] = {}
    for nid, t in by_id.items():
        deps[nid] = []
        for d in t.get("dependencies", []):
            if d not in by_id:
                problem("unknown_dependencies", {"node_id": nid, "dependency": d})
            else:
                deps[nid].append(d)
    annotated: dict[frozenset[str], Mapping[str, Any]] = {}
    for c in _cycle_groups(list(by_id.values()), problem):
        annotated[frozenset(c["nodes"])] = c
    ids = sorted(by_id)
    comps = _sccs(ids, deps)
    used_annotations: set[frozenset[str]] = set()
    cyclic: list[list[str]] = []
    for comp in comps:
        is_cycle = len(comp) > 1 or comp[0] in deps[comp[0]]
        if not is_cycle:
            continue
        key = frozenset(comp)
        if key in annotated:
            used_annotations.add(key)
            continue
        if len(comp) == 1:
            problem("self_dependencies", comp[0])
        else:
            problem("cycles", comp)
    for key, c in annotated.items():
        if key not in used_annotations:
            problem("annotated_cycles_not_found", c["group"])
    if problems:
        kinds = sorted(problems)
        code = {
            "duplicate_node_ids": "DUPLICATE_NODE_ID",
            "unknown_dependencies": "UNKNOWN_DEPENDENCY",
            "self_dependencies": "SELF_DEPENDENCY",
            "cycles": "DEPENDENCY_CYCLE",
            "inconsistent_cycle_groups": "WORK_QUEUE_GRAPH_INVALID",
        }.get(kinds[0], "WORK_QUEUE_GRAPH_INVALID") if len(kinds) == 1 else "WORK_QUEUE_GRAPH_INVALID"
        summary = "; ".join(f"{k}: {json.dumps(problems[k])}" for k in kinds)
        raise WorkQueueGraphError(
            f"work queue graph is invalid: {summary}", code=code, details={"problems": problems},
            hints=["a cycle is allowed only with every member annotated "
                   "\"cycle\": {\"group\": ..., \"max_iterations\": N}"],
        )

    # unroll annotated cycles
    member_of: dict[str, tuple[list[str], int]] = {}
    for key in used_annotations:
        c = annotated[key]
        order = list(c["nodes"])
        for m in order:
            member_of[m] = (order, int(c["max_iterations"]))

    def last_round_id(nid: str) -> str:
        if nid in member_of:
            return f"{nid}{ROUND_SEP}{member_of[nid][1]}"
        return nid

    default_attempts = int(budgets.get("default_max_attempts", DEFAULT_MAX_ATTEMPTS))
    default_timeout = float(budgets.get("default_timeout_s", DEFAULT_TIMEOUT_S))
    nodes: dict[str, Node] = {}

    def make(nid: str, src: Mapping[str, Any], rnd: int | None, ndeps: list[str]) -> None:
        if nid in nodes:
            raise WorkQueueGraphError(f"unrolled cycle id {nid!r} clashes with a declared node id",
                                      code="WORK_QUEUE_GRAPH_INVALID",
                                      details={"problems": {"unrolled_id_clashes": [nid]}})
        digest_src = dict(src) if rnd is None else {**src, "_round": rnd}
        nodes[nid] = Node(
            node_id=nid, source_id=src["node_id"], round=rnd,
            dependencies=tuple(sorted(set(ndeps))), task=src,
            task_spec_digest=digest_json(digest_src),
            priority_group=int(src.get("priority_group", 0)),
            risk_level=_risk_level(src), resource_key=_resource_key(src),
            max_attempts=int(src.get("max_attempts", default_attempts)),
            timeout_s=float(src.get("timeout_s", default_timeout)),
            endgame_duplicates=(int(src["endgame_duplicates"]) if src.get("endgame_duplicates") is not None
                                else None),
        )

    for nid in ids:
        t = by_id[nid]
        if nid not in member_of:
            make(nid, t, None, [last_round_id(d) for d in deps[nid]])
            continue
        order, rounds = member_of[nid]
        pos = order.index(nid)
        for r in range(1, rounds + 1):
            nd: list[str] = []
            for d in deps[nid]:
                if d in member_of and member_of[d][0] is order:
                    if order.index(d) < pos:
                        nd.append(f"{d}{ROUND_SEP}{r}")
                    elif r > 1:
                        nd.append(f"{d}{ROUND_SEP}{r - 1}")
                else:
                    nd.append(last_round_id(d))
            make(f"{nid}{ROUND_SEP}{r}", t, r, nd)
    return finish_graph(nodes)


def finish_graph(nodes: Mapping[str, Node]) -> Graph:
    ordered = dict(sorted(nodes.items()))
    dependents: dict[str, list[str]] = {n: [] for n in ordered}
    for n in ordered.values():
        for d in n.dependencies:
            dependents[d].append(n.node_id)
    # Kahn with a sorted frontier: a deterministic topological order
    indeg = {n: len(ordered[n].dependencies) for n in ordered}
    import heapq
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
    for n in ordered.values():
        resource_counts[n.resource_key] = resource_counts.get(n.resource_key, 0) + 1
    digest = digest_json([[n.node_id, list(n.dependencies), n.task_spec_digest] for n in ordered.values()])
    return Graph(nodes=ordered, topo_order=tuple(topo),
                 dependents={k: tuple(sorted(v)) for k, v in dependents.items()},
                 descendants=descendants, resource_counts=resource_counts, digest=digest)
