"""The scheduler's view of a run kept current by what changed (O(changed nodes) per pass).

`scheduler.decide` re-derives every node's status and re-scores every ready
node on each pass: O(nodes). `ReadySet` holds the same facts between passes
and updates them only for the nodes an event touched:

- `note(record, state)` marks the node a ledger record concerns (by its
  node_id, else through its node_execution_id) as changed;
- `refresh(state)` recomputes the status of the changed nodes and, where a
  status moved, of their dependents (a failure blocks a whole subtree, a
  success may make children ready), and keeps the counts per status, the
  number of active attempts, the running set and a heap of ready nodes keyed
  by the scheduler's order (scores, then its tie-breaks);
- `decide(state, policy, seed, wave_index)` takes the best `free` ready
  nodes off the heap (stale entries are dropped as they surface) and builds
  the decision through `scheduler.build_decision`.

The decision is the one `scheduler.decide` returns for the same state, byte
for byte (tests/runloop/test_ready_set.py checks it with hypothesis on
random graphs and event sequences), so recorded runs replay unchanged.
"""
from __future__ import annotations

import heapq
from typing import Any, Iterable, Mapping

from .runstate import RunState
from .scheduler import (SchedulerPolicy, attempts_left, build_decision, duplicable, duplicates_allowed, entry, scores, sort_key,
                        status_of, statuses)
from .workqueue import Graph

UNFINISHED = ("ready", "pending", "running")


class ReadySet:
    def __init__(self, graph: Graph, state: RunState) -> None:
        self.graph = graph
        self.status: dict[str, str] = statuses(graph, state)
        self.counts: dict[str, int] = {}
        for s in self.status.values():
            self.counts[s] = self.counts.get(s, 0) + 1
        self._ns = {nid: state.node(nid) for nid in graph.nodes}
        self.active_total = sum(len(ns.active) for ns in self._ns.values())
        self.running = {n for n, s in self.status.items() if s == "running"}
        self._key: dict[str, tuple] = {}
        self._heap: list[tuple] = []
        for nid, s in self.status.items():
            if s == "ready":
                self._key[nid] = self._sort_key(nid, state)
                self._heap.append(self._key[nid])
        heapq.heapify(self._heap)
        self._dirty: set[str] = set()

    # ---- what changed ----------------------------------------------------------
    def note(self, record: Any, state: RunState) -> None:
        """A record was applied to `state`: remember which node it may have changed."""
        nid = _get(record, "node_id")
        if nid is None:
            payload = _get(record, "payload") or {}
            neid = _get(record, "node_execution_id") or (payload.get("node_execution_id")
                                                          if isinstance(payload, Mapping) else None)
            nid = (state.executions.get(neid) or {}).get("node_id") if neid else None
        if nid in self.status:
            self._dirty.add(nid)

    def touch(self, node_ids: Iterable[str]) -> None:
        self._dirty.update(n for n in node_ids if n in self.status)

    def refresh(self, state: RunState) -> None:
        """Bring statuses, counts and the ready heap up to `state` for the changed nodes."""
        work = list(self._dirty)
        self._dirty.clear()
        for nid in work:
            ns = state.node(nid)
            old = self._ns[nid]
            if ns is not old:
                self.active_total += len(ns.active) - len(old.active)
                self._ns[nid] = ns
        nodes, status = self.graph.nodes, self.status
        while work:
            nid = work.pop()
            ns = self._ns[nid]
            new = status_of(nodes[nid], ns, status)
            was = status[nid]
            if new == "ready":
                key = self._sort_key(nid, state)
                if was != "ready" or self._key.get(nid) != key:
                    self._key[nid] = key
                    heapq.heappush(self._heap, key)
            elif was == "ready":
                self._key.pop(nid, None)
            if new == was:
                continue
            status[nid] = new
            self.counts[was] -= 1
            self.counts[new] = self.counts.get(new, 0) + 1
            if was == "running":
                self.running.discard(nid)
            if new == "running":
                self.running.add(nid)
            work.extend(self.graph.dependents.get(nid, ()))  # their status reads this one

    def _sort_key(self, nid: str, state: RunState) -> tuple:
        node = self.graph.nodes[nid]
        return (-scores(self.graph, state, node)["total"], node.priority_group, nid, node.task_spec_digest)

    # ---- the pass ----------------------------------------------------------------
    def _best(self, k: int) -> list[str]:
        """The first k ready nodes in the scheduler's order; the heap keeps them."""
        out: list[tuple] = []
        heap = self._heap
        while heap and len(out) < k:
            key = heapq.heappop(heap)
            nid = key[2]
            if self._key.get(nid) == key and self.status[nid] == "ready" and (not out or out[-1] != key):
                out.append(key)
        for key in out:
            heapq.heappush(heap, key)
        if len(heap) > 64 and len(heap) > 4 * max(1, len(self._key)):  # mostly stale: rebuild
            self._heap = list(self._key.values())
            heapq.heapify(self._heap)
        return [key[2] for key in out]

    def decide(self, state: RunState, policy: SchedulerPolicy, seed: int,
               wave_index: int) -> dict[str, Any] | None:
        """What `scheduler.decide(graph, state, policy, seed, wave_index)` returns."""
        self.refresh(state)
        free = policy.max_parallel - self.active_total
        left = attempts_left(state, policy)
        if left is not None:
            free = min(free, left)
        if free <= 0:
            return None
        n_ready = self.counts.get("ready", 0)
        selected = [entry(self.graph, state, n, "retry" if state.node(n).attempts else "first")
                    for n in self._best(free)]
        endgame = False
        unfinished = sum(self.counts.get(s, 0) for s in UNFINISHED)
        if not n_ready and self.running and unfinished <= policy.endgame_threshold \
                and any(duplicates_allowed(policy, self.graph.nodes[n]) > 0 for n in self.running):
            endgame = True
            dup = sorted((entry(self.graph, state, n, "endgame_duplicate") for n in self.running
                          if duplicable(self.graph, state, policy, n)), key=sort_key)
            selected = dup[:free]
        return build_decision(self.graph, state, policy, seed, wave_index, free=free,
                              active_total=self.active_total, selected=selected, endgame=endgame,
                              deferred=0 if endgame else n_ready - len(selected))

    def done(self) -> bool:
        """Every node succeeded, failed or is blocked (as of the last refresh)."""
        return not any(self.counts.get(s, 0) for s in UNFINISHED)


def _get(record: Any, name: str) -> Any:
    if isinstance(record, Mapping):
        return record.get(name)
    return getattr(record, name, None)
