"""LedgerWriter.append_many writes a wave's records as one batch (one head read, one time
stamp, one insert; the decision and grants signed, the rest not): each record is byte for
byte what appending the drafts one by one in one transaction gives at the same time, the
grant's payload bytes handed in are the encoder's, and the run state is the fold of the
stored events."""
from __future__ import annotations

import itertools

from coordinator import runstate as rs
from coordinator.gateway import auth
from coordinator.runloop.loop import SIGNED_TOPICS
from coordinator.runloop.writer import LedgerWriter
from coordinator.runstate import RunState, fold
from ledger import Ledger
from registry.canonical import canonical_json
from registry.signing import SigningKey

TS = "2026-11-26T09:00:00.000001Z"


def _ledger(root):
    ids = (f"ev-{i:06d}" for i in itertools.count())
    engines = Ledger.open(None, root).engines
    return Ledger(engines, root, clock=lambda: TS, new_ids=lambda n: [next(ids) for _ in range(n)])


def _wave(key: SigningKey) -> list[tuple[str, dict, dict]]:
    drafts: list[tuple[str, dict, dict]] = [
        (rs.SCHEDULING_DECISION, {"wave_id": "w0001", "selected": [{"node_id": "n1"}, {"node_id": "n2"}]},
         {"wave_id": "w0001"}),
        (rs.WAVE_STARTED, {"wave_id": "w0001", "nodes": ["n1", "n2"]}, {"wave_id": "w0001"})]
    for nid in ("n1", "n2"):
        neid = f"ne-{nid}"
        g = auth.issue_grant(key=key, run_id="run-1", wave_id="w0001", node_id=nid, node_execution_id=neid,
                             capabilities=["write"], ttl_s=600, policy_id="default", seed=1,
                             inputs_hash="sha256:" + "0" * 64, worker_public_key=SigningKey.generate().public.raw)
        issued, data = auth.issued_payload(g)
        keys = {"node_id": nid, "node_execution_id": neid, "wave_id": "w0001", "task_id": nid}
        drafts.append((auth.ISSUED_TOPIC, issued, {**keys, "payload_canonical": data}))
        drafts.append((rs.TASK_DISPATCHED, {"node_execution_id": neid, "attempt": 1, "kind": "first"}, dict(keys)))
    return drafts


def test_append_many_is_the_drafts_appended_one_by_one_in_one_transaction(ops_root) -> None:
    key = SigningKey.generate()
    a, b = _ledger(ops_root / "a"), _ledger(ops_root / "b")
    try:
        writer = LedgerWriter(a, "run-1", key, RunState())
        writer.append(rs.RUN_STARTED, {"base_ref": "x"})
        drafts = _wave(key)
        recs = writer.append_many(drafts, signed=SIGNED_TOPICS)
        b.append("run-1", rs.RUN_STARTED, {"base_ref": "x"})
        with b.transaction() as tx:
            one_by_one = [tx.append("run-1", t, p, signer=key if t in SIGNED_TOPICS else None,
                                    **{k: v for k, v in keys.items() if k != "payload_canonical"})
                          for t, p, keys in drafts]
        assert [r.record_bytes for r in recs] == [r.record_bytes for r in one_by_one]
        assert [r.signature for r in recs] == [r.signature for r in one_by_one]
        assert [r.kid is not None for r in recs] == [t in SIGNED_TOPICS for t, _, _ in drafts]
        stored = a.events("run-1")
        assert [r.record_bytes for r in stored[1:]] == [r.record_bytes for r in recs]
        assert all(canonical_json(r.payload) in r.record_bytes for r in stored)
        assert writer.state == fold(stored) and writer.appends == len(stored)
    finally:
        a.close()
        b.close()


def test_append_many_of_nothing_writes_nothing(ops_root) -> None:
    led = _ledger(ops_root)
    try:
        writer = LedgerWriter(led, "run-1", SigningKey.generate(), RunState())
        assert writer.append_many([]) == [] and led.events("run-1") == []
    finally:
        led.close()
