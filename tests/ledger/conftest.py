"""Fixtures for ledger tests: a real SQLite ledger file under a temporary ops root."""
from __future__ import annotations

from pathlib import Path

import pytest

from ledger import Ledger
from registry.signing import Keyring, SigningKey


@pytest.fixture
def ledger(ops_root: Path):
    led = Ledger.open(None, ops_root)
    yield led
    led.close()


@pytest.fixture
def signer(ops_root: Path) -> SigningKey:
    """The coordinator's key under ops/keys/, where `dome ledger verify` finds it."""
    from coordinator.keys import load_or_create_signing_key
    return load_or_create_signing_key(ops_root)


@pytest.fixture
def keyring(signer: SigningKey) -> Keyring:
    ring = Keyring()
    ring.add(signer.public)
    return ring


def append_sample_run(led: Ledger, run_id: str = "run-1", signer: SigningKey | None = None) -> None:
    """A small but complete run: two nodes, a retry, a proposal, gate and promotion."""
    from ledger import EventDraft
    d = EventDraft
    led.append_batch(run_id, [
        d("run.started", {"seed": 7, "node_ids": ["n1", "n2"]}),
        d("wave.started", {"node_ids": ["n1", "n2"]}, wave_id="w1"),
        d("task.dispatched", {"attempt": 1}, wave_id="w1", node_id="n1", task_id="n1", node_execution_id="n1:1"),
        d("task.dispatched", {"attempt": 1}, wave_id="w1", node_id="n2", task_id="n2", node_execution_id="n2:1"),
        d("task.progress", {"fraction": 0.5}, wave_id="w1", node_id="n1", task_id="n1", node_execution_id="n1:1"),
        d("task.timeout", {}, wave_id="w1", node_id="n2", task_id="n2", node_execution_id="n2:1"),
        d("patch.submitted", {"proposal_id": "p1", "diff_digest": "sha256:" + "a" * 64},
          wave_id="w1", node_id="n1", task_id="n1", node_execution_id="n1:1"),
        d("task.completed", {"outcome": "succeeded", "outputs": ["patch:p1"]}, wave_id="w1",
          node_id="n1", task_id="n1", node_execution_id="n1:1"),
        d("task.ack", {}, wave_id="w1", node_id="n1", task_id="n1"),
        d("future.topic", {"anything": [1, 2]}),
        d("task.dispatched", {"attempt": 2}, wave_id="w1", node_id="n2", task_id="n2", node_execution_id="n2:2"),
    ])
    led.append(run_id, "apply.result", {"proposal_id": "p1", "status": "applied"}, wave_id="w1", signer=signer)
    led.append(run_id, "gate.computed", {"passed": False, "missing": ["n2"]}, signer=signer)
