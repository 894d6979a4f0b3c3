"""The worker's PatchProposal and its hunk fingerprints."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, model_validator

from .base import (ArtifactHeader, Atomicity, Digest, GitSha, Identifier, NonNegInt, OpenModel,
                   RiskClass, require_one_of, unique_list)

IntentTag = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_.-]*$")]
PathStr = Annotated[str, StringConstraints(min_length=1)]


class RangeHint(OpenModel):
    start: NonNegInt
    end: NonNegInt


class HunkFingerprint(OpenModel):
    path: PathStr
    base_ref: GitSha
    base_context_digest: Digest
    edit_digest: Digest
    range_hint: RangeHint | None = None
    fingerprint_version: str = Field(min_length=1)


class Risk(OpenModel):
    risk_class: RiskClass = Field(alias="class")
    surface_area: NonNegInt | None = None
    files_touched: NonNegInt | None = None
    deps_touched: bool | None = None
    migration: bool | None = None
    critical_paths: list[str] | None = None


class WorkerRunMeta(OpenModel):
    tool_profile_id: Identifier
    run_id: Identifier
    wave_id: Identifier
    node_id: Identifier | None = None
    node_execution_id: Identifier | None = None
    worker_id: Identifier | None = None
    budgets_used: dict[str, Any] | None = None
    intent: str | None = None
    exit_code: int | None = None


class PatchProposal(ArtifactHeader):
    artifact_kind: Literal["dome.patch_proposal/v1"]
    proposal_id: Identifier
    base_ref: GitSha
    base_tree_hash: GitSha
    diff_canonicalization: str = Field(min_length=1)
    diff_digest: Digest
    diff_ref: Digest | None = None
    diff_unified: str | None = None
    touched_files: unique_list(PathStr)
    intent_tags: unique_list(IntentTag)
    risk: Risk
    hunk_fingerprints: list[HunkFingerprint] | None = None
    declared_constraints: dict[str, Any]
    atomicity: Atomicity | None = None
    parent_proposal_id: Identifier | None = None
    split_policy: Literal["by_file", "by_hunk", "by_region"] | None = None
    worker_run_meta: WorkerRunMeta

    @model_validator(mode="after")
    def _diff_by_ref_or_inline(self) -> "PatchProposal":
        require_one_of(self, "diff_ref", "diff_unified")
        return self
