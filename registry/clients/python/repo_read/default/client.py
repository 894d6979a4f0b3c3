"""Typed client for dome.repo_read@1.0.0 (profile default). Generated; do not edit."""
from __future__ import annotations

from typing import Any, Literal, Protocol

from .types import GetBaseRefResponse, GetDiffStatsResponse, GrepResponse, ListTreeResponse, ReadFileResponse


class Transport(Protocol):
    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]: ...


class RepoReadClient:
    """RepoReadSkill: Observation-only access to the wave's base checkout. Paths are repo-relative and confined to the grant's read roots; .git is never readable."""

    TOOL_ID = "repo_read"
    CONTRACT = "dome.repo_read@1.0.0"
    PROFILE_ID = "default"
    SPEC_DIGEST = "sha256:49f15ca3d4b60168501a239c139db7cf6a45c0984cd12f340ef549140d8cfe30"
    METHODS = ("get_base_ref", "get_diff_stats", "grep", "list_tree", "read_file", )

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    def get_base_ref(self) -> GetBaseRefResponse:
        """The wave's immutable base commit and tree.

        side effect: none; replay: Convergent; idempotency: pure; errors: GRANT_REJECTED, INTERNAL_ERROR, INVALID_REQUEST.
        """
        params: dict[str, Any] = {}
        return self._transport.call("get_base_ref", params)  # type: ignore[return-value]

    def get_diff_stats(self, *, paths: list[str] | None = None) -> GetDiffStatsResponse:
        """Line counts of the worker's scratch changes against the base.

        side effect: none; replay: Convergent; idempotency: pure; errors: GRANT_REJECTED, INTERNAL_ERROR, INVALID_REQUEST, PATH_DENIED.
        """
        params: dict[str, Any] = {}
        if paths is not None:
            params["paths"] = paths
        return self._transport.call("get_diff_stats", params)  # type: ignore[return-value]

    def grep(self, *, pattern: str, fixed_string: bool | None = None, ignore_case: bool | None = None, max_matches: int | None = None, path: str | None = None, ref: str | None = None) -> GrepResponse:
        """Search file contents.

        side effect: none; replay: Convergent; idempotency: pure; errors: GRANT_REJECTED, INTERNAL_ERROR, INVALID_PATTERN, INVALID_REQUEST, PATH_DENIED.
        """
        params: dict[str, Any] = {"pattern": pattern}
        if fixed_string is not None:
            params["fixed_string"] = fixed_string
        if ignore_case is not None:
            params["ignore_case"] = ignore_case
        if max_matches is not None:
            params["max_matches"] = max_matches
        if path is not None:
            params["path"] = path
        if ref is not None:
            params["ref"] = ref
        return self._transport.call("grep", params)  # type: ignore[return-value]

    def list_tree(self, *, max_depth: int | None = None, max_entries: int | None = None, path: str | None = None, ref: str | None = None) -> ListTreeResponse:
        """List files and directories under a path.

        side effect: none; replay: Convergent; idempotency: pure; errors: FILE_NOT_FOUND, GRANT_REJECTED, INTERNAL_ERROR, INVALID_REQUEST, PATH_DENIED.
        """
        params: dict[str, Any] = {}
        if max_depth is not None:
            params["max_depth"] = max_depth
        if max_entries is not None:
            params["max_entries"] = max_entries
        if path is not None:
            params["path"] = path
        if ref is not None:
            params["ref"] = ref
        return self._transport.call("list_tree", params)  # type: ignore[return-value]

    def read_file(self, *, path: str, max_bytes: int | None = None, ref: str | None = None) -> ReadFileResponse:
        """Read one file of the base checkout.

        side effect: none; replay: Convergent; idempotency: pure; errors: FILE_NOT_FOUND, GRANT_REJECTED, INTERNAL_ERROR, INVALID_REQUEST, NOT_A_FILE, PATH_DENIED.
        """
        params: dict[str, Any] = {"path": path}
        if max_bytes is not None:
            params["max_bytes"] = max_bytes
        if ref is not None:
            params["ref"] = ref
        return self._transport.call("read_file", params)  # type: ignore[return-value]
