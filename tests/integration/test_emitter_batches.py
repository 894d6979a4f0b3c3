"""The integration Emitter writes the per-proposal records (verdicts, checkpoints,
apply results, conflict decisions) in one ledger commit per step, not one commit
each; any other record writes the held ones first, so the ledger's order is the
order the steps happened in; and the held records are written when a step ends
with an error too."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest

from coordinator.integration.evidence import T_APPLY, T_CHECKPOINT, T_GATE, T_PLAN, T_PROPOSAL, verify_artifact
from coordinator.integration.recorder import FLUSH_AT, Emitter, records_of
from coordinator.keys import load_keyring, load_or_create_signing_key
from ledger import Ledger


class Commits:
    """A real ledger that counts its write transactions."""

    def __init__(self, ledger: Ledger) -> None:
        self._l, self.commits = ledger, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._l, name)

    def append(self, *a: Any, **k: Any) -> Any:
        self.commits += 1
        return self._l.append(*a, **k)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        self.commits += 1
        with self._l.transaction() as tx:
            yield tx


@pytest.fixture
def env(tmp_path: Path):
    ops = tmp_path / "ops"
    ledger = Ledger.open(None, ops)
    try:
        yield Commits(ledger), load_or_create_signing_key(ops), load_keyring(ops)
    finally:
        ledger.close()


def _layer(emit: Emitter, k: int) -> None:
    emit(T_PROPOSAL, {"artifact_kind": "dome.proposal_verification/v1", "proposal_id": f"p{k}",
                      "diff_digest": f"sha256:{k:064x}"})
    emit(T_CHECKPOINT, {"artifact_kind": "dome.checkpoint/v1", "checkpoint_id": f"cp-{k + 1:04d}"})
    emit(T_APPLY, {"artifact_kind": "dome.apply_result/v1", "proposal_id": f"p{k}", "applied": True})


def test_per_proposal_records_share_one_commit_and_keep_their_order(env) -> None:
    ledger, key, keyring = env
    emit = Emitter(ledger, "r1", key, lambda: "2026-11-25T00:00:00Z")
    for k in range(20):
        _layer(emit, k)
    assert ledger.commits == 0 and ledger.events("r1") == []  # held: nothing written yet
    emit(T_PLAN, {"stack_plan_id": "sp-1", "ordered_proposals": []})
    assert ledger.commits == 2  # the 60 held records in one commit, then the plan
    recs = records_of(ledger, "r1")
    assert [r.topic for r in recs] == [T_PROPOSAL, T_CHECKPOINT, T_APPLY] * 20 + [T_PLAN]
    assert [r.artifact.get("proposal_id") for r in recs if r.topic == T_APPLY] == [f"p{k}" for k in range(20)]
    for r in recs:
        verify_artifact(r.artifact, keyring)  # each record is signed as before
    assert ledger.verify(keyring).ok  # the hash chain and record signatures hold across the batch


def test_flush_writes_what_is_held_and_a_long_step_commits_in_bounded_batches(env) -> None:
    ledger, key, _ = env
    emit = Emitter(ledger, "r2", key, lambda: "2026-11-25T00:00:00Z")
    n = FLUSH_AT - 1  # 3 * n records: two full batches and some held
    for k in range(n):
        _layer(emit, k)
    assert ledger.commits == 2  # two full batches written on the way
    emit.flush()
    emit.flush()  # nothing left: no empty commit
    assert ledger.commits == 3
    assert len(ledger.events("r2")) == 3 * n


def test_a_replayed_step_is_adopted_not_written_twice(env) -> None:
    ledger, key, _ = env
    first = Emitter(ledger, "r3", key, lambda: "2026-11-25T00:00:00Z")
    for k in range(3):
        _layer(first, k)
    first.flush()
    before = len(ledger.events("r3"))
    again = Emitter(ledger, "r3", key, lambda: "2026-11-25T00:00:01Z", replay=records_of(ledger, "r3"))
    for k in range(4):
        _layer(again, k)
    again(T_GATE, {"decision_id": "gate-r3", "passed": True})
    topics = [e.topic for e in ledger.events("r3")]
    assert len(topics) == before + 4  # only layer 3 and the gate are new
    assert topics[-4:] == [T_PROPOSAL, T_CHECKPOINT, T_APPLY, T_GATE]


def test_the_finish_stage_writes_held_records_when_a_step_fails(env, monkeypatch) -> None:
    from coordinator.integration import finish

    ledger, key, _ = env
    emit = Emitter(ledger, "r4", key, lambda: "2026-11-25T00:00:00Z")
    with pytest.raises(RuntimeError):
        with finish._writes_held(emit):
            _layer(emit, 0)
            raise RuntimeError("the canvas broke")
    assert [e.topic for e in ledger.events("r4")] == [T_PROPOSAL, T_CHECKPOINT, T_APPLY]
