"""Typed client for dome.patch_proposal@1.2.0 (profile default). Generated; do not edit."""
from __future__ import annotations

from typing import Any, Literal, Protocol

from .types import CompleteTaskResponse, GetTaskResponse, PutArtifactResponse, ReportProgressResponse, SubmitMetadataResponse, SubmitPatchResponse


class Transport(Protocol):
    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]: ...


class PatchProposalClient:
    """PatchProposalSkill: The worker gateway: read the attempt's task, propose a patch, attach metadata, store artifacts, report progress and complete the attempt. No git apply, commit, merge or promote. Every write carries an idempotency_key and the node_execution_id of the attempt; the gateway dedupes on (run_id, method, idempotency_key). complete_task is the terminal write and spends a single-use grant."""

    TOOL_ID = "patch_proposal"
    CONTRACT = "dome.patch_proposal@1.2.0"
    PROFILE_ID = "default"
    SPEC_DIGEST = "sha256:654700632cc743f595ae1957ceb464e36ac6e62ef0dd4fbbda250fedd261efce"
    METHODS = ("complete_task", "get_task", "put_artifact", "report_progress", "submit_metadata", "submit_patch", )

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    def complete_task(self, *, idempotency_key: str, node_execution_id: str, outcome: Literal["succeeded", "failed"], carried: list[dict[str, Any]] | None = None, error: None | dict[str, Any] | None = None, evidence: list[dict[str, Any]] | None = None, metrics: dict[str, Any] | None = None, proposal_id: None | str | None = None, summary: dict[str, Any] | None = None) -> CompleteTaskResponse:
        """Report the attempt's result (succeeded or failed); its terminal write: spends a single-use grant.

        side effect: proposal_register; replay: Convergent; idempotency: dedupe_by_key; errors: ATTEMPT_NOT_LIVE, GRANT_REJECTED, IDEMPOTENCY_CONFLICT, INTERNAL_ERROR, INVALID_REQUEST, PROPOSAL_NOT_FOUND.
        """
        params: dict[str, Any] = {"idempotency_key": idempotency_key, "node_execution_id": node_execution_id, "outcome": outcome}
        if carried is not None:
            params["carried"] = carried
        if error is not None:
            params["error"] = error
        if evidence is not None:
            params["evidence"] = evidence
        if metrics is not None:
            params["metrics"] = metrics
        if proposal_id is not None:
            params["proposal_id"] = proposal_id
        if summary is not None:
            params["summary"] = summary
        return self._transport.call("complete_task", params)  # type: ignore[return-value]

    def get_task(self, *, node_execution_id: str) -> GetTaskResponse:
        """The task spec slice and base of this attempt.

        side effect: none; replay: Convergent; idempotency: pure; errors: ATTEMPT_NOT_LIVE, GRANT_REJECTED, INTERNAL_ERROR, INVALID_REQUEST.
        """
        params: dict[str, Any] = {"node_execution_id": node_execution_id}
        return self._transport.call("get_task", params)  # type: ignore[return-value]

    def put_artifact(self, *, content_b64: str, idempotency_key: str, media_type: str, node_execution_id: str, expected_digest: str | None = None, name: str | None = None) -> PutArtifactResponse:
        """Store bytes in the content-addressed store.

        side effect: artifact_put; replay: Convergent; idempotency: content_addressed; errors: ARTIFACT_TOO_LARGE, DIGEST_MISMATCH, GRANT_REJECTED, IDEMPOTENCY_CONFLICT, INTERNAL_ERROR, INVALID_REQUEST.
        """
        params: dict[str, Any] = {"content_b64": content_b64, "idempotency_key": idempotency_key, "media_type": media_type, "node_execution_id": node_execution_id}
        if expected_digest is not None:
            params["expected_digest"] = expected_digest
        if name is not None:
            params["name"] = name
        return self._transport.call("put_artifact", params)  # type: ignore[return-value]

    def report_progress(self, *, fraction: float, idempotency_key: str, node_execution_id: str, message: str | None = None) -> ReportProgressResponse:
        """Report progress of this node attempt.

        side effect: proposal_register; replay: Convergent; idempotency: dedupe_by_key; errors: GRANT_REJECTED, IDEMPOTENCY_CONFLICT, INTERNAL_ERROR, INVALID_REQUEST.
        """
        params: dict[str, Any] = {"fraction": fraction, "idempotency_key": idempotency_key, "node_execution_id": node_execution_id}
        if message is not None:
            params["message"] = message
        return self._transport.call("report_progress", params)  # type: ignore[return-value]

    def submit_metadata(self, *, idempotency_key: str, meta: dict[str, Any], node_execution_id: str, proposal_id: str) -> SubmitMetadataResponse:
        """Attach metadata to a proposal of this node attempt.

        side effect: proposal_register; replay: Convergent; idempotency: dedupe_by_key; errors: GRANT_REJECTED, IDEMPOTENCY_CONFLICT, INTERNAL_ERROR, INVALID_REQUEST, PROPOSAL_NOT_FOUND.
        """
        params: dict[str, Any] = {"idempotency_key": idempotency_key, "meta": meta, "node_execution_id": node_execution_id, "proposal_id": proposal_id}
        return self._transport.call("submit_metadata", params)  # type: ignore[return-value]

    def submit_patch(self, *, idempotency_key: str, node_execution_id: str, proposal: dict[str, Any], carried: list[dict[str, Any]] | None = None) -> SubmitPatchResponse:
        """Register the PatchProposal of this node attempt (its diff uploaded first with put_artifact).

        side effect: proposal_register; replay: Convergent; idempotency: dedupe_by_key; errors: BASE_MISMATCH, GRANT_REJECTED, IDEMPOTENCY_CONFLICT, INTERNAL_ERROR, INVALID_REQUEST, PATH_DENIED, PROPOSAL_INVALID.
        """
        params: dict[str, Any] = {"idempotency_key": idempotency_key, "node_execution_id": node_execution_id, "proposal": proposal}
        if carried is not None:
            params["carried"] = carried
        return self._transport.call("submit_patch", params)  # type: ignore[return-value]
