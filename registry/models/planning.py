"""What the coordinator plans and dispatches: the work queue, its task nodes,
and the SpawnSpec of one worker invocation. All closed."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, model_validator

from .base import (Atomicity, Capability, Digest, DomeModel, GitRef, GitSha, Identifier, ImageRef,
                   OpenModel, PinnedRef, PositiveFloat, RiskClass, Seed, Timestamp, Version,
                   require_one_of, unique_list)
from .common import ActionSpec, Budgets

OutputType = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*(:[A-Za-z0-9_.:/-]+)?$")]
_SUITE = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$"
_REF_NAME = r"^[^\s~^:?*\[\\]+$"


class CycleAnnotation(DomeModel):
    group: Identifier
    max_iterations: int = Field(ge=1, le=1000)


class TaskNode(DomeModel):
    node_id: Identifier
    description: str | None = None
    containers: list[ImageRef]
    required_capabilities: unique_list(Capability)
    required_outputs: unique_list(OutputType)
    dependencies: unique_list(Identifier)
    action_spec: ActionSpec
    atomicity: Atomicity | None = None
    risk: RiskClass | None = None
    priority_group: int | None = Field(default=None, ge=0)
    timeout_s: PositiveFloat | None = None
    max_attempts: int | None = Field(default=None, ge=1)
    cycle: CycleAnnotation | None = None


class ValidationSpec(DomeModel):
    suite: str = Field(pattern=_SUITE)
    name: Identifier | None = None
    argv: list[str] | None = Field(default=None, min_length=1)
    env: dict[str, str] | None = None
    params: dict[str, Any] | None = None
    required: bool = True
    timeout_s: PositiveFloat | None = None
    risk_classes: unique_list(RiskClass) | None = None

    @model_validator(mode="after")
    def _command_needs_argv(self) -> "ValidationSpec":
        if self.suite == "command" and self.argv is None:
            raise ValueError("suite command needs argv")
        return self


class SchedulingKnobs(DomeModel):
    """Run-loop knobs (parallelism, endgame, per-attempt defaults)."""

    max_parallel: int | None = Field(default=None, ge=1, le=4096)
    endgame_threshold: int | None = Field(default=None, ge=0)
    endgame_max_duplicates: int | None = Field(default=None, ge=0, le=8)
    default_timeout_s: float | None = Field(default=None, gt=0, le=86400)
    default_max_attempts: int | None = Field(default=None, ge=1, le=100)
    heartbeat_timeout_s: PositiveFloat | None = None
    rebase_waves_on_integration_head: bool | None = None


class SandboxLimits(DomeModel):
    """Per-attempt resource limits (rlimits, cgroups, tmpfs sizes)."""

    cpu_seconds: int | None = Field(default=None, ge=1)
    memory_mb: int | None = Field(default=None, ge=64)
    max_open_files: int | None = Field(default=None, ge=16)
    max_processes: int | None = Field(default=None, ge=8)
    max_file_mb: int | None = Field(default=None, ge=1)
    tmp_mb: int | None = Field(default=None, ge=1)
    disk_mb: int | None = Field(default=None, ge=8)


class WorkQueue(DomeModel):
    artifact_kind: Literal["dome.work.queue/v1"]
    version: Version | None = None
    name: Identifier | None = None
    description: str | None = None
    repo: str = Field(min_length=1)
    base_ref: GitRef
    determinism_seed: Seed
    policy: Identifier
    promote_to: str = Field(min_length=1, pattern=_REF_NAME)
    if_target_moved: Literal["refuse", "stack"] = "refuse"
    budgets: Budgets | None = None
    tasks: list[TaskNode] = Field(min_length=1)
    validations: list[ValidationSpec] | None = None
    scheduling: SchedulingKnobs | None = None
    limits: SandboxLimits | None = None


class Gateway(DomeModel):
    url: str | None = None
    socket: str | None = None

    @model_validator(mode="after")
    def _url_or_socket(self) -> "Gateway":
        require_one_of(self, "url", "socket")
        return self


class DsseSignatureEntry(OpenModel):
    keyid: str
    sig: str


class DsseEnvelope(OpenModel):
    payloadType: str = Field(min_length=1)
    payload: str
    signatures: list[DsseSignatureEntry] = Field(min_length=1)


class SpawnSpec(DomeModel):
    artifact_kind: Literal["dome.spawn_spec/v1"] | None = None
    version: Version | None = None
    run_id: Identifier
    wave_id: Identifier
    node_id: Identifier
    node_execution_id: Identifier
    task_id: Identifier | None = None
    task_spec_ref: PinnedRef
    tool_profile_ref: PinnedRef
    container_ref: ImageRef
    action_spec: ActionSpec
    determinism_seed: Seed
    inputs_hash: Digest
    base_ref: GitSha | None = None
    base_tree_hash: GitSha | None = None
    attempt: int | None = Field(default=None, ge=1)
    created_at: Timestamp | None = None
    gateway: Gateway | None = None
    grant: DsseEnvelope | None = None
    timeout_s: PositiveFloat | None = None
