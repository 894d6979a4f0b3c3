"""The ToolProfile: a signed, short-lived, least-privilege grant."""
from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from .base import (ArtifactHeader, Capability, Digest, DomeModel, Identifier, Kid, Method, NonNegFloat, NonNegInt,
                   PinnedRef, Timestamp, require_one_of, unique_list)
from .common import Budgets


class NetworkPolicy(DomeModel):
    allow_hosts: list[str] | None = None
    deny_by_default: bool | None = None
    allow_models: list[str] | None = None


class ExecPolicy(DomeModel):
    allowed: bool | None = None
    allowed_programs: list[str] | None = None
    max_processes: int | None = Field(default=None, ge=1)
    max_memory_bytes: NonNegInt | None = None
    max_open_files: NonNegInt | None = None
    max_cpu_seconds: NonNegFloat | None = None


class Constraints(DomeModel):
    read_roots: list[str] | None = None
    write_roots: list[str] | None = None
    deny_globs: list[str] | None = None
    allowed_paths: list[str] | None = None
    network: NetworkPolicy | None = None
    exec: ExecPolicy | None = None
    env: dict[str, str] | None = None
    max_patch_bytes: NonNegInt | None = None
    max_files: NonNegInt | None = None


class ContractRef(DomeModel):
    contract: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*@[0-9]+\.[0-9]+\.[0-9]+$")
    tool_id: Identifier
    ref: PinnedRef | None = None
    digest: Digest


class Confirmation(DomeModel):
    """Sender constraint (cnf): the worker key every call must be signed with."""

    kid: Kid
    public_key: str = Field(pattern=r"^[A-Za-z0-9+/]{43}=$")


class ToolProfile(ArtifactHeader):
    """Closed: a credential with fields the verifier does not know is refused."""

    model_config = ConfigDict(extra="forbid")

    artifact_kind: Literal["dome.tool_profile/v1"]
    profile_id: Identifier
    contract_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*@[0-9]+\.[0-9]+\.[0-9]+$")
    issued_at: Timestamp
    expires_at: Timestamp
    not_before: Timestamp | None = None
    jti: str = Field(pattern=r"^[A-Za-z0-9_-]{16,128}$")
    audience: str = Field(min_length=1, max_length=200)
    wave_id: Identifier
    worker_id: Identifier | None = None
    single_use: bool
    allowed_methods: unique_list(Method) | None = None
    allowed_capabilities: unique_list(Capability) | None = None
    resolver_ref: PinnedRef | None = None
    card_ref: PinnedRef | None = None
    policy_version: str | None = Field(default=None, min_length=1)
    policy_ref: PinnedRef | None = None
    contracts: list[ContractRef] | None = None
    cnf: Confirmation | None = None
    constraints: Constraints
    budgets: Budgets
    issuer: Identifier

    @model_validator(mode="after")
    def _methods_or_capabilities(self) -> "ToolProfile":
        require_one_of(self, "allowed_methods", "allowed_capabilities")
        return self
