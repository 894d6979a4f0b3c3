"""The coordinator's StackPlan and the ApplyResult of each proposal."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import ArtifactHeader, Atomicity, Digest, GitSha, Identifier, NonNegInt, OpenModel, Seed
from .proposals import HunkFingerprint


class OrderedProposal(OpenModel):
    proposal_id: Identifier
    diff_digest: Digest
    atomicity: Atomicity | None = None


class Rejection(OpenModel):
    proposal_id: Identifier
    reason: Literal["policy", "conflict", "redundant", "invalid", "stale_base", "budget"]
    detail: str | None = None


class SelectionScore(OpenModel):
    proposal_id: Identifier
    score: float
    components: dict[str, float] | None = None


class StackPlan(ArtifactHeader):
    artifact_kind: Literal["dome.stack_plan/v1"]
    stack_plan_id: Identifier
    base_ref: GitSha
    ordered_proposals: list[OrderedProposal]
    rejected: list[Rejection]
    checkpoint_strategy: Literal["per_layer", "per_batch"]
    expected_validations: list[str]
    determinism_seed: Seed
    selection_scores: list[SelectionScore] | None = None
    selection_decision_id: Identifier | None = None


class ConflictSummary(OpenModel):
    files: list[str]
    hunks: list[HunkFingerprint] | None = None
    message: str | None = None


class ApplyResult(ArtifactHeader):
    artifact_kind: Literal["dome.apply_result/v1"]
    proposal_id: Identifier
    diff_digest: Digest
    base_ref: GitSha
    applied: bool
    stack_plan_id: Identifier | None = None
    position: NonNegInt | None = None
    apply_mode: Literal["atomic_proposal", "atomic_file", "hunk_split"] | None = None
    conflict_summary: ConflictSummary
    checkpoint_id: Identifier | None = None
    head_ref: GitSha
    head_tree_hash: GitSha | None = None
