"""Request and response types of dome.repo_read@1.0.0 under profile default. Generated; do not edit."""
from __future__ import annotations

from typing import Any, Literal, NotRequired, Required, TypedDict


GetBaseRefRequest = TypedDict("GetBaseRefRequest", {
}, total=False)

GetBaseRefResponse = TypedDict("GetBaseRefResponse", {
    "base_ref": Required[str],
    "base_tree_hash": Required[str],
    "schema_version": Required[str],
}, total=False)

GetDiffStatsRequest = TypedDict("GetDiffStatsRequest", {
    "paths": NotRequired[list[str]],
}, total=False)

GetDiffStatsResponse = TypedDict("GetDiffStatsResponse", {
    "base_ref": Required[str],
    "deletions": Required[int],
    "files": Required[list[dict[str, Any]]],
    "files_changed": Required[int],
    "insertions": Required[int],
    "schema_version": Required[str],
}, total=False)

GrepRequest = TypedDict("GrepRequest", {
    "fixed_string": NotRequired[bool],
    "ignore_case": NotRequired[bool],
    "max_matches": NotRequired[int],
    "path": NotRequired[str],
    "pattern": Required[str],
    "ref": NotRequired[str],
}, total=False)

GrepResponse = TypedDict("GrepResponse", {
    "matches": Required[list[dict[str, Any]]],
    "schema_version": Required[str],
    "truncation": Required[dict[str, Any]],
}, total=False)

ListTreeRequest = TypedDict("ListTreeRequest", {
    "max_depth": NotRequired[int],
    "max_entries": NotRequired[int],
    "path": NotRequired[str],
    "ref": NotRequired[str],
}, total=False)

ListTreeResponse = TypedDict("ListTreeResponse", {
    "entries": Required[list[dict[str, Any]]],
    "path": Required[str],
    "schema_version": Required[str],
    "truncation": Required[dict[str, Any]],
}, total=False)

ReadFileRequest = TypedDict("ReadFileRequest", {
    "max_bytes": NotRequired[int],
    "path": Required[str],
    "ref": NotRequired[str],
}, total=False)

ReadFileResponse = TypedDict("ReadFileResponse", {
    "content": Required[str],
    "digest": Required[str],
    "encoding": Required[Literal["utf-8", "base64"]],
    "path": Required[str],
    "schema_version": Required[str],
    "size": Required[int],
    "truncated": Required[bool],
}, total=False)

__all__ = ["GetBaseRefRequest", "GetBaseRefResponse", "GetDiffStatsRequest", "GetDiffStatsResponse", "GrepRequest", "GrepResponse", "ListTreeRequest", "ListTreeResponse", "ReadFileRequest", "ReadFileResponse"]
