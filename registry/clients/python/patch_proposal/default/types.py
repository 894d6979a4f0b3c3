"""Request and response types of dome.patch_proposal@1.2.0 under profile default. Generated; do not edit."""
from __future__ import annotations

from typing import Any, Literal, NotRequired, Required, TypedDict


CompleteTaskRequest = TypedDict("CompleteTaskRequest", {
    "carried": NotRequired[list[dict[str, Any]]],
    "error": NotRequired[None | dict[str, Any]],
    "evidence": NotRequired[list[dict[str, Any]]],
    "idempotency_key": Required[str],
    "metrics": NotRequired[dict[str, Any]],
    "node_execution_id": Required[str],
    "outcome": Required[Literal["succeeded", "failed"]],
    "proposal_id": NotRequired[None | str],
    "summary": NotRequired[dict[str, Any]],
}, total=False)

CompleteTaskResponse = TypedDict("CompleteTaskResponse", {
    "duplicate": NotRequired[bool],
    "event_sequence": NotRequired[int],
    "recorded": Required[bool],
    "schema_version": Required[str],
}, total=False)

GetTaskRequest = TypedDict("GetTaskRequest", {
    "node_execution_id": Required[str],
}, total=False)

GetTaskResponse = TypedDict("GetTaskResponse", {
    "base_ref": Required[str],
    "base_tree_hash": NotRequired[str],
    "node_execution_id": Required[str],
    "node_id": NotRequired[str],
    "resume": NotRequired[list[dict[str, Any]]],
    "schema_version": Required[str],
    "task": Required[dict[str, Any]],
    "wave_id": NotRequired[str],
}, total=False)

PutArtifactRequest = TypedDict("PutArtifactRequest", {
    "content_b64": Required[str],
    "expected_digest": NotRequired[str],
    "idempotency_key": Required[str],
    "media_type": Required[str],
    "name": NotRequired[str],
    "node_execution_id": Required[str],
}, total=False)

PutArtifactResponse = TypedDict("PutArtifactResponse", {
    "digest": Required[str],
    "duplicate": Required[bool],
    "schema_version": Required[str],
    "size": Required[int],
}, total=False)

ReportProgressRequest = TypedDict("ReportProgressRequest", {
    "fraction": Required[float],
    "idempotency_key": Required[str],
    "message": NotRequired[str],
    "node_execution_id": Required[str],
}, total=False)

ReportProgressResponse = TypedDict("ReportProgressResponse", {
    "duplicate": Required[bool],
    "recorded": Required[bool],
    "schema_version": Required[str],
}, total=False)

SubmitMetadataRequest = TypedDict("SubmitMetadataRequest", {
    "idempotency_key": Required[str],
    "meta": Required[dict[str, Any]],
    "node_execution_id": Required[str],
    "proposal_id": Required[str],
}, total=False)

SubmitMetadataResponse = TypedDict("SubmitMetadataResponse", {
    "accepted": Required[bool],
    "duplicate": Required[bool],
    "proposal_id": Required[str],
    "schema_version": Required[str],
}, total=False)

SubmitPatchRequest = TypedDict("SubmitPatchRequest", {
    "carried": NotRequired[list[dict[str, Any]]],
    "idempotency_key": Required[str],
    "node_execution_id": Required[str],
    "proposal": Required[dict[str, Any]],
}, total=False)

SubmitPatchResponse = TypedDict("SubmitPatchResponse", {
    "accepted": Required[bool],
    "duplicate": Required[bool],
    "event_sequence": NotRequired[int],
    "proposal_id": Required[str],
    "schema_version": Required[str],
}, total=False)

__all__ = ["CompleteTaskRequest", "CompleteTaskResponse", "GetTaskRequest", "GetTaskResponse", "PutArtifactRequest", "PutArtifactResponse", "ReportProgressRequest", "ReportProgressResponse", "SubmitMetadataRequest", "SubmitMetadataResponse", "SubmitPatchRequest", "SubmitPatchResponse"]
