"""Pydantic v2 models of dome's artifacts, one module per family.

The JSON Schemas in registry/schemas/ are the source of truth.
MODEL_SCHEMAS maps each model to the schema (or the part of a schema, as
"<name>#<json pointer>") it must match; tests/registry/test_model_drift.py
fails when they drift apart. Every model is strict (no type coercion).
"""
from __future__ import annotations

from .base import ArtifactHeader, DomeModel, OpenModel
from .common import ActionSpec, Budgets, EvidenceRef
from .decisions import (ConflictDecision, NodeScores, SchedulingDecision, SchedulingEntry, SchedulingTieBreak,
                        SelectionDecision, SelectionEntry)
from .errors import ErrorObjectModel
from .events import ControlEvent, Envelope
from .evidence import Environment, HumanApproval, PromotionDecision, ValidationReport
from .grants import Confirmation, Constraints, ContractRef, ExecPolicy, NetworkPolicy, ToolProfile
from .planning import (CycleAnnotation, DsseEnvelope, DsseSignatureEntry, Gateway, SandboxLimits,
                       SchedulingKnobs, SpawnSpec, TaskNode, ValidationSpec, WorkQueue)
from .proposals import HunkFingerprint, PatchProposal, RangeHint, Risk, WorkerRunMeta
from .stacking import ApplyResult, ConflictSummary, OrderedProposal, Rejection, SelectionScore, StackPlan

MODEL_SCHEMAS: dict[type[DomeModel], str] = {
    # whole schemas
    Envelope: "envelope",
    ControlEvent: "control_event",
    ToolProfile: "tool_profile",
    SpawnSpec: "spawn_spec",
    TaskNode: "task_node",
    WorkQueue: "work_queue",
    PatchProposal: "patch_proposal",
    StackPlan: "stack_plan",
    ApplyResult: "apply_result",
    ValidationReport: "validation_report",
    PromotionDecision: "promotion_decision",
    SchedulingDecision: "scheduling_decision",
    SelectionDecision: "selection_decision",
    ConflictDecision: "conflict_decision",
    ErrorObjectModel: "error_object",
    # parts of schemas
    ArtifactHeader: "common#/$defs/artifact_header",
    ActionSpec: "common#/$defs/action_spec",
    Budgets: "common#/$defs/budgets",
    EvidenceRef: "common#/$defs/evidence_ref",
    Constraints: "tool_profile#/properties/constraints",
    NetworkPolicy: "tool_profile#/properties/constraints/properties/network",
    ExecPolicy: "tool_profile#/properties/constraints/properties/exec",
    ContractRef: "tool_profile#/properties/contracts/items",
    Confirmation: "tool_profile#/properties/cnf",
    CycleAnnotation: "task_node#/properties/cycle",
    ValidationSpec: "work_queue#/$defs/validation",
    SchedulingKnobs: "work_queue#/$defs/scheduling",
    SandboxLimits: "work_queue#/$defs/limits",
    Gateway: "spawn_spec#/properties/gateway",
    DsseEnvelope: "spawn_spec#/properties/grant",
    DsseSignatureEntry: "spawn_spec#/properties/grant/properties/signatures/items",
    HunkFingerprint: "patch_proposal#/$defs/hunk_fingerprint",
    RangeHint: "patch_proposal#/$defs/hunk_fingerprint/properties/range_hint",
    Risk: "patch_proposal#/properties/risk",
    WorkerRunMeta: "patch_proposal#/properties/worker_run_meta",
    OrderedProposal: "stack_plan#/properties/ordered_proposals/items",
    Rejection: "stack_plan#/properties/rejected/items",
    SelectionScore: "stack_plan#/properties/selection_scores/items",
    ConflictSummary: "apply_result#/properties/conflict_summary",
    Environment: "validation_report#/properties/environment",
    HumanApproval: "promotion_decision#/properties/human_approval",
    SchedulingEntry: "scheduling_decision#/$defs/entry",
    NodeScores: "scheduling_decision#/$defs/entry/properties/scores",
    SchedulingTieBreak: "scheduling_decision#/$defs/entry/properties/tie_break",
    SelectionEntry: "selection_decision#/properties/entries/items",
}

SCHEMA_MODELS: dict[str, type[DomeModel]] = {v: k for k, v in MODEL_SCHEMAS.items() if "#" not in v}


def model_for(schema_name: str) -> type[DomeModel]:
    """The model registered for a whole schema (KeyError if none)."""
    return SCHEMA_MODELS[schema_name]


__all__ = [name for name in dir() if not name.startswith("_")]
