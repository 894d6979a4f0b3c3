"""The run loop's schedule path per attempt, beside the code before, in one process.

    python benchmarks/schedule_path.py [--attempts 400] [--rounds 5] [--nodes 1000,10000]

Three rows, each a median of rounds that alternate the two contenders so both
see the same machine load (thread CPU time, `time.thread_time`):

- grant issuance (`coordinator.gateway.auth.issue`, what `draft_attempt` calls
  for every attempt): the ToolProfile's canonical bytes made once for the
  signature, the token and the digest, and its schema check of the fields that
  change between attempts of one scope; beside the same call with the steps as
  they were (the whole schema every time, the payload serialised three times,
  the token re-decoded from the envelope, pairwise `uniqueItems`);
- the base of a dependent attempt (`attempts.ancestor_plan`) in a run of N
  succeeded tasks, beside the whole-run read it replaces (every proposal, every
  node's state and dependency list, per attempt): O(ancestors) against O(N);
- a wave's records (`LedgerWriter.append_many`: the decision, the wave start, each
  attempt's `grant.issued` and `task.dispatched`, the acks) on a real SQLite ledger:
  one batch with a signer per record and the grant's payload bytes spliced from its
  signed profile, beside the records appended one by one in the same transaction with
  every payload encoded again (per attempt of a wave of `--wave` attempts);
- one full pass of the cyclic garbage collector over what start-up leaves
  (the coordinator's modules, the registry, a graph of N nodes), with that
  heap frozen (`gc.freeze()`, as the run loop does once it has started) and
  without.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from coordinator import issuance as grants  # noqa: E402  - where issue_profile looks up its steps
from coordinator.gateway import auth  # noqa: E402
from coordinator.runloop.attempts import ancestor_plan  # noqa: E402
from coordinator.runloop.derived_base import plan_derived_base  # noqa: E402
from coordinator.runstate import NodeState  # noqa: E402
from registry import schema_lite  # noqa: E402
from registry import toolprofile as tp  # noqa: E402
from registry.canonical import digest_json  # noqa: E402
from registry.signing import SigningKey  # noqa: E402


def _pairwise_unique(items: list) -> bool:
    eq = schema_lite._equal
    return not any(eq(items[i], items[j]) for i in range(len(items)) for j in range(i + 1, len(items)))


@contextlib.contextmanager
def before() -> Iterator[None]:
    """The issuance steps as they were before (same building blocks, each step as it ran then)."""
    saved = grants.validate_varying, tp.sign_body, schema_lite._unique

    signed_once = tp.sign_body

    def sign_body(body: bytes, key: SigningKey, *, payload_type: str = tp.PAYLOAD_TYPE) -> tuple[dict, str]:
        envelope = signed_once(body, key, payload_type=payload_type)[0]
        return envelope, tp.envelope_to_token(envelope)  # the token decoded back out of the envelope

    grants.validate_varying = lambda name, inst, varying: schema_lite.validate(name, inst)  # type: ignore
    tp.sign_body = sign_body  # type: ignore
    schema_lite._unique = _pairwise_unique  # type: ignore
    schema_lite._compiled.cache_clear()  # the compiled checks pick up the pairwise uniqueItems
    try:
        yield
    finally:
        grants.validate_varying, tp.sign_body, schema_lite._unique = saved  # type: ignore
        schema_lite._compiled.cache_clear()


def _issue(key: SigningKey, i: int, old: bool) -> Any:
    g, issued = auth.issue(key=key, run_id="run-20261126T000000-abcdef", wave_id=f"w{i:04d}", node_id=f"t{i}",
                           node_execution_id=f"ne-{i:016x}", capabilities=["write:patch"], ttl_s=600,
                           policy_id="default", seed=i, inputs_hash="sha256:" + "0" * 64,
                           worker_public_key=SigningKey.generate().public.raw)
    if old:  # auth.issue serialised the payload a second time for its digest (a copy of it)
        issued["payload_digest"] = digest_json(dict(g.payload))
    return g


def grant_row(attempts: int, rounds: int) -> dict[str, Any]:
    key = SigningKey.generate()
    res: dict[str, list[float]] = {"now": [], "before": []}
    for r in range(rounds):
        for name in ("before", "now") if r % 2 else ("now", "before"):
            ctx = before() if name == "before" else contextlib.nullcontext()
            with ctx:
                _issue(key, 0, name == "before")  # warm (compiled schema, memo)
                c0 = time.thread_time()
                for i in range(attempts):
                    _issue(key, i, name == "before")
                res[name].append(1e6 * (time.thread_time() - c0) / attempts)
    return {k: round(statistics.median(v), 1) for k, v in res.items()}


def _old_plan(node_id: str, graph_nodes: dict, st: Any) -> list:
    """The whole-run read the base of a dependent attempt did before."""
    by_neid = {p.get("node_execution_id"): p for p in st.proposals}
    winners = {n: by_neid[st.node(n).succeeded_by] for n in graph_nodes
               if st.node(n).succeeded and st.node(n).succeeded_by in by_neid}
    deps = {n: list(node.dependencies) for n, node in graph_nodes.items()}
    return plan_derived_base(node_id, deps, winners)


def plan_row(n: int, rounds: int, reps: int = 20) -> dict[str, Any]:
    deps = {"c0": (), "c1": ("c0",), "c2": ("c1",), **{f"x{i:05d}": () for i in range(n)}}
    nodes = {k: types.SimpleNamespace(dependencies=v) for k, v in deps.items()}
    proposals = [{"proposal_id": f"p-{k}", "node_execution_id": f"ne-{k}"} for k in deps if k != "c2"]
    states = {k: NodeState(succeeded_by=None if k == "c2" else f"ne-{k}") for k in deps}
    st = types.SimpleNamespace(node=states.__getitem__, proposals=proposals,
                               proposal_of={p["node_execution_id"]: p for p in proposals})
    contenders: dict[str, Callable[[], list]] = {"now": lambda: ancestor_plan("c2", nodes, st),
                                                 "before": lambda: _old_plan("c2", nodes, st)}
    assert contenders["now"]() == contenders["before"]()
    res: dict[str, list[float]] = {"now": [], "before": []}
    for _ in range(rounds):
        for name, fn in contenders.items():
            c0 = time.thread_time()
            for _ in range(reps):
                fn()
            res[name].append(1e6 * (time.thread_time() - c0) / reps)
    return {"nodes": n, **{k: round(statistics.median(v), 1) for k, v in res.items()}}


def _wave_drafts(key: SigningKey, w: int, size: int) -> list[tuple[str, dict, dict]]:
    from coordinator import runstate as rs
    wid = f"w{w:05d}"
    drafts: list[tuple[str, dict, dict]] = [
        (rs.SCHEDULING_DECISION, {"wave_id": wid, "selected": [{"node_id": f"t{w}-{i}", "attempt": 1, "kind": "first"}
                                                              for i in range(size)]}, {"wave_id": wid}),
        (rs.WAVE_STARTED, {"wave_id": wid, "nodes": [f"t{w}-{i}" for i in range(size)]}, {"wave_id": wid})]
    for i in range(size):
        nid, neid = f"t{w}-{i}", f"ne-{w:08x}{i:08x}"
        g = auth.issue_grant(key=key, run_id="run-bench", wave_id=wid, node_id=nid, node_execution_id=neid,
                             capabilities=["write:patch"], ttl_s=600, policy_id="default", seed=i,
                             inputs_hash="sha256:" + "0" * 64, worker_public_key=SigningKey.generate().public.raw)
        issued, data = auth.issued_payload(g)
        keys = {"node_id": nid, "node_execution_id": neid, "wave_id": wid, "task_id": nid}
        drafts.append((auth.ISSUED_TOPIC, issued, {**keys, "payload_canonical": data}))
        drafts.append((rs.TASK_DISPATCHED, {"node_execution_id": neid, "attempt": 1, "kind": "first", "wave_id": wid,
                                            "spawn_spec_digest": "sha256:" + "1" * 64, "jti": g.jti}, dict(keys)))
        drafts.append((rs.TASK_ACK, {"node_execution_id": f"ne-prev-{i}", "accepted": True, "proposal_id": f"p-{i}"},
                       {"node_id": f"prev-{i}", "node_execution_id": f"ne-prev-{i}", "task_id": f"prev-{i}"}))
    return drafts


def _one_by_one(writer: Any, drafts: list, signed: frozenset[str]) -> None:
    """append_many as it was: each record its own append in the transaction, every payload encoded."""
    with writer.lock:
        with writer.ledger.transaction() as tx:
            recs = [tx.append(writer.run_id, t, p, signer=writer.signer if t in signed else None,
                              **{k: v for k, v in keys.items() if k != "payload_canonical"})
                    for t, p, keys in drafts]
        writer._applied(recs)


def wave_row(waves: int, size: int, rounds: int) -> dict[str, Any]:
    import tempfile

    from coordinator.runloop.loop import SIGNED_TOPICS
    from coordinator.runloop.writer import LedgerWriter
    from coordinator.runstate import RunState
    from ledger import Ledger

    key = SigningKey.generate()
    res: dict[str, list[float]] = {"now": [], "before": []}
    with tempfile.TemporaryDirectory(prefix="dome-wave-") as tmp:
        ledger = Ledger.open(None, Path(tmp))
        try:
            writer = LedgerWriter(ledger, "run-bench", key, RunState())
            writer.append("run.started", {"run_id": "run-bench"})
            w = 0
            for r in range(rounds):
                for name in ("before", "now") if r % 2 else ("now", "before"):
                    batch = [_wave_drafts(key, w + k, size) for k in range(waves)]
                    w += waves
                    c0 = time.thread_time()
                    for drafts in batch:
                        if name == "now":
                            writer.append_many(drafts, signed=SIGNED_TOPICS)
                        else:
                            _one_by_one(writer, drafts, SIGNED_TOPICS)
                    res[name].append(1e6 * (time.thread_time() - c0) / (waves * size))
        finally:
            ledger.close()
    return {"wave": size, **{k: round(statistics.median(v), 1) for k, v in res.items()}}


def gc_row(n: int, rounds: int) -> dict[str, Any]:
    import coordinator.runloop.loop  # noqa: F401  - what a run imports
    from coordinator.workqueue import parse_work_queue
    wq = parse_work_queue({"artifact_kind": "dome.work.queue/v1", "repo": ".", "base_ref": "main",
                           "determinism_seed": 1, "policy": "default", "promote_to": "refs/heads/dome/bench",
                           "tasks": [{"node_id": f"t{i:05d}", "containers": [], "required_capabilities": ["write"],
                                      "required_outputs": ["patch_proposal"], "dependencies": [],
                                      "action_spec": {"intent": "command", "argv": ["sh", "-c", f"echo {i}"]}}
                                     for i in range(n)]})
    res: dict[str, list[float]] = {"frozen": [], "not frozen": []}
    gc.collect()
    for _ in range(rounds):
        for name in ("not frozen", "frozen"):
            if name == "frozen":
                gc.freeze()
            c0 = time.thread_time()
            gc.collect()
            res[name].append(1e3 * (time.thread_time() - c0))
            gc.unfreeze()
    del wq
    return {"nodes": n, **{k: round(statistics.median(v), 2) for k, v in res.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--attempts", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--nodes", default="1000,10000")
    ap.add_argument("--wave", type=int, default=4, help="attempts per wave (the wave-records row)")
    ap.add_argument("--waves", type=int, default=40, help="waves per round (the wave-records row)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    out: dict[str, Any] = {"grant_issue_us": grant_row(a.attempts, a.rounds)}
    out["wave_records_us"] = wave_row(a.waves, a.wave, a.rounds)
    sizes = [int(x) for x in a.nodes.split(",") if x]
    out["dependent_base_us"] = [plan_row(n, a.rounds) for n in sizes]
    out["full_gc_ms"] = [gc_row(n, a.rounds) for n in sizes]
    if a.json:
        print(json.dumps(out, indent=2))
        return 0
    g = out["grant_issue_us"]
    print(f"grant issuance per attempt      {g['now']:9.1f} us   before {g['before']:9.1f} us   "
          f"ratio {g['before'] / g['now']:.2f}")
    w = out["wave_records_us"]
    print(f"a wave's records per attempt    {w['now']:9.1f} us   before {w['before']:9.1f} us   "
          f"ratio {w['before'] / w['now']:.2f}   (one batch of {w['wave']} attempts' records)")
    for r in out["dependent_base_us"]:
        print(f"dependent base, {r['nodes']:>6} nodes   {r['now']:9.1f} us   before {r['before']:9.1f} us   "
              f"ratio {r['before'] / r['now']:.0f}")
    for r in out["full_gc_ms"]:
        print(f"full gc pass over start-up, {r['nodes']:>6} nodes: {r['frozen']:7.2f} ms frozen, "
              f"{r['not frozen']:7.2f} ms not frozen (what each of a run's full passes walks again)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
