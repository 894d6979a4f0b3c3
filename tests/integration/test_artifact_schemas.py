"""Every artifact the integration stage emits validates against its registry
schema (StackPlan, SelectionDecision, ApplyResult, ConflictDecision,
ValidationReport, PromotionDecision)."""
from __future__ import annotations

from pathlib import Path

from coordinator.integration.finish import FinishContext, finish_run
from coordinator.integration.policy import IntegrationPolicy
from registry.schema_store import validate
from registry.signing import SigningKey
from tests.integration.conftest import edit_line, head, make_proposal
from tests.integration.fakes import MemLedger

SCHEMAS = {"dome.stack_plan/v1": "stack_plan", "dome.apply_result/v1": "apply_result",
           "dome.validation_report/v1": "validation_report",
           "dome.promotion_decision/v1": "promotion_decision",
           "dome.conflict_decision/v1": "conflict_decision",
           "dome.selection_decision/v1": "selection_decision"}


def test_emitted_artifacts_match_their_schemas(big_repo: Path, tmp_path: Path) -> None:
    props = [make_proposal(big_repo, "a", edit_line("f03.txt", 10, "A")),
             make_proposal(big_repo, "b", edit_line("f03.txt", 10, "B"), atomicity="hunk_ok"),
             make_proposal(big_repo, "c", edit_line("f04.txt", 10, "C"))]
    diffs_by_id = {p["proposal_id"]: d for p, d in props}
    ledger = MemLedger()
    ctx = FinishContext(run_id="run-s", repo=big_repo, base_ref=head(big_repo),
                        proposals=[p for p, _ in props], ledger=ledger,
                        signing_key=SigningKey(b"\x03" * 32), ops_root=tmp_path / "ops",
                        validations=[{"suite": "command", "argv": ["true"]}],
                        policy=IntegrationPolicy(suites_by_risk={"low": ("tests",)},
                                                 promote_to="refs/heads/out"),
                        diff_loader=lambda p: diffs_by_id[p["proposal_id"]])
    res = finish_run(ctx)
    assert res.status == "promoted", res.missing
    seen = set()
    for ev in ledger.events("run-s"):
        kind = ev.payload.get("artifact_kind")
        if kind in SCHEMAS:
            validate(SCHEMAS[kind], ev.payload)
            seen.add(kind)
    assert seen == set(SCHEMAS)
