"""Coordinator decisions persisted for replay audit, each with the tie-break
fields and order the spec fixes (section 10)."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .base import ArtifactHeader, Digest, Identifier, NonNegInt, OpenModel, Seed, Timestamp, tie_break

SCHEDULING_ORDER = ["scores.total desc", "node_priority_group", "node_id", "task_spec_digest"]
SELECTION_TIE_BREAK = ["proposal_id", "created_at", "diff_digest"]
CONFLICT_TIE_BREAK = ["policy_precedence", "proposal_id", "conflict_fingerprint"]


class NodeScores(OpenModel):
    blocking: float
    rarity: float
    confidence: float
    risk_penalty: float
    total: float


class SchedulingTieBreak(OpenModel):
    node_priority_group: NonNegInt
    node_id: Identifier
    task_spec_digest: Digest


class SchedulingEntry(OpenModel):
    node_id: Identifier
    kind: Literal["first", "retry", "endgame_duplicate"] | None = None
    attempt: int | None = Field(default=None, ge=1)
    scores: NodeScores
    tie_break: SchedulingTieBreak
    rank: NonNegInt | None = None
    reason: str | None = None


class SchedulingDecision(ArtifactHeader):
    artifact_kind: Literal["dome.scheduling_decision/v1"]
    decision_id: Identifier
    wave_id: Identifier
    determinism_seed: Seed
    policy_version: str | None = Field(default=None, min_length=1)
    ledger_sequence: NonNegInt | None = None
    endgame: bool | None = None
    candidates: list[SchedulingEntry] | None = None
    selected: list[SchedulingEntry]
    tie_break_order: tie_break(SCHEDULING_ORDER)
    graph_digest: Digest | None = None
    policy: dict[str, Any] | None = None
    state_basis: dict[str, Any] | None = None
    free_slots: NonNegInt | None = None
    deferred_count: NonNegInt | None = None


class SelectionEntry(OpenModel):
    proposal_id: Identifier
    created_at: Timestamp
    diff_digest: Digest
    accepted: bool
    score: float | None = None
    reason: str | None = None


class SelectionDecision(ArtifactHeader):
    artifact_kind: Literal["dome.selection_decision/v1"]
    decision_id: Identifier
    stack_plan_id: Identifier | None = None
    entries: list[SelectionEntry]
    tie_break_order: tie_break(SELECTION_TIE_BREAK)


class ConflictDecision(ArtifactHeader):
    artifact_kind: Literal["dome.conflict_decision/v1"]
    decision_id: Identifier
    proposal_id: Identifier
    policy_precedence: NonNegInt
    conflict_fingerprint: Digest
    action: Literal["reorder", "split", "resolver", "human", "drop"]
    conflicting_with: list[Identifier] | None = None
    conflict_summary: dict[str, Any] | None = None
    derived_proposal_ids: list[Identifier] | None = None
    validation_escalation: list[str] | None = None
    reason: str | None = None
    tie_break_order: tie_break(CONFLICT_TIE_BREAK)
