"""Evidence and the gate: ValidationReport and PromotionDecision."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from .base import ArtifactHeader, Digest, GitSha, Identifier, ImageRef, OpenModel, Timestamp, require_one_of, unique_list
from .common import EvidenceRef


class Environment(OpenModel):
    container_digests: list[ImageRef]
    toolchain: dict[str, str] | None = None
    environment_digest: Digest | None = None


class ValidationReport(ArtifactHeader):
    artifact_kind: Literal["dome.validation_report/v1"]
    report_id: Identifier
    suite: str = Field(min_length=1)
    required: bool | None = None
    head_ref: GitSha | None = None
    checkpoint_id: Identifier | None = None
    included_proposals: unique_list(Identifier)
    environment: Environment
    passed: bool
    summary: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None
    evidence: list[EvidenceRef] | None = None
    started_at: Timestamp | None = None
    finished_at: Timestamp | None = None

    @model_validator(mode="after")
    def _bound_to_a_head(self) -> "ValidationReport":
        require_one_of(self, "head_ref", "checkpoint_id")
        return self


class HumanApproval(OpenModel):
    required: bool | None = None
    consent_jti: str | None = None
    approved_by: str | None = None


class PromotionDecision(ArtifactHeader):
    artifact_kind: Literal["dome.promotion_decision/v1"]
    decision_id: Identifier
    outcome: Literal["promoted", "blocked"]
    from_head_ref: GitSha
    to_ref: str = Field(min_length=1)
    policy_version: str = Field(min_length=1)
    stack_plan_id: Identifier | None = None
    evidence_refs: list[EvidenceRef]
    missing: list[str]
    reasons: list[str] | None = None
    human_approval: HumanApproval | None = None
    previous_target: GitSha | None = None
