"""Artifacts produced by other areas' real code conform to the contracts:
the schema and the model both accept them."""
from __future__ import annotations

from pathlib import Path

import pytest

from registry import schema_store
from registry.models import ControlEvent, Envelope
from registry.signing import SigningKey


def test_ledger_records_are_valid_envelopes_and_control_events(tmp_path: Path) -> None:
    ledger_mod = pytest.importorskip("ledger")
    ledger = ledger_mod.Ledger.open(None, tmp_path)
    key = SigningKey(bytes(range(32)))
    records = [
        ledger.append("run-1", "run.started", {"seed": 7}),
        ledger.append("run-1", "task.dispatched", {"fraction": 0.5, "argv": ["x"]}, wave_id="w1",
                      node_id="n1", node_execution_id="n1.1", task_id="n1", signer=key),
        ledger.append("run-1", "promotion.computed", {"outcome": "blocked"}, signer=key),
    ]
    records += ledger.events("run-1")
    for record in records:
        data = record.to_json()
        for name, model in (("envelope", Envelope), ("control_event", ControlEvent)):
            schema_store.validate(name, data)
            assert model.model_validate(data).to_json_obj() == data
