"""Artifacts produced by other areas' real code conform to the contracts: their schemas
(the source of truth) accept them."""
from __future__ import annotations

from pathlib import Path

from registry import schema_store
from registry.signing import SigningKey


def test_ledger_records_are_valid_envelopes_and_control_events(tmp_path: Path) -> None:
    from ledger import Ledger

    ledger = Ledger.open(None, tmp_path)
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
        for name in ("envelope", "control_event"):
            schema_store.validate(name, data)


def test_worker_built_proposals_are_schema_valid_and_sealed_by_the_one_rule(git_repo: Path) -> None:
    from registry.sealing import check_seal
    from tests.conftest import git
    from worker_sdk.proposal import build_proposal

    base = git(git_repo, "rev-parse", "HEAD")
    tree = git(git_repo, "rev-parse", "HEAD^{tree}")
    (git_repo / "README.md").write_text("hello\nworld\n")
    (git_repo / "new.bin").write_bytes(bytes(range(256)))
    spawn = {"run_id": "run-1", "wave_id": "w1", "node_id": "n1", "node_execution_id": "n1.1",
             "base_ref": base, "base_tree_hash": tree, "determinism_seed": 7,
             "inputs_hash": "sha256:" + "a" * 64, "action_spec": {"intent": "command", "argv": ["true"]}}
    from registry.canonical import digest_bytes

    built = build_proposal(git_repo, spawn=spawn, profile={"profile_id": "tp-1"}, intent_tags=["docs"],
                           upload=digest_bytes)
    assert built is not None
    proposal, _diff = built
    schema_store.validate("patch_proposal", proposal)
    assert check_seal(proposal, require_signature=False) is None


def test_scheduler_decisions_have_the_contract_shape() -> None:
    """The run loop's SchedulingDecision body (scores, tie-break fields, order)
    matches the schema; the header fields a recorded artifact also needs
    (version, created_at, producer) are stamped here as the emitter would."""
    from coordinator.runloop.loop import make_decision
    from coordinator.runstate import fold
    from coordinator.scheduler import SchedulerPolicy
    from coordinator.workqueue import parse_work_queue

    def task(nid: str, deps: list[str], **extra: object) -> dict:
        return {"node_id": nid, "dependencies": deps, "containers": [], "required_capabilities": ["write"],
                "required_outputs": ["patch_proposal"], "action_spec": {"intent": "command", "argv": ["true"]},
                **extra}

    graph = parse_work_queue({"artifact_kind": "dome.work.queue/v1", "repo": ".", "base_ref": "main",
                              "determinism_seed": 3, "policy": "default", "promote_to": "refs/heads/out",
                              "tasks": [task("a", []), task("b", ["a"]), task("c", [], risk="high"),
                                        task("d", [], priority_group=1)]}).graph
    decision = make_decision(graph, fold([]), SchedulerPolicy(max_parallel=2), 3, "run-1")
    assert decision is not None
    stamped = {"version": "1.0.0", "created_at": "2026-01-01T00:00:00Z", "producer": "coordinator", **decision}
    schema_store.validate("scheduling_decision", stamped)
