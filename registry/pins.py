"""Pinned registry references (spec §13): `tool_id@<commit sha>` and release tags.

Pure parsing and naming; resolving through git is coordinator/registry_git.py.
A pin must name an immutable commit by its full object id (40 hex digits, or
64 for SHA-256 repositories): never a branch, a tag or an abbreviated sha.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import DomeError
from .gitoid import is_git_oid

_TOOL = re.compile(r"^[a-z][a-z0-9_]*$")
_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
TAG_PREFIX = "registry/"


class PinError(DomeError):
    code = "PIN_INVALID"


class PinNotImmutable(PinError):
    code = "PIN_NOT_IMMUTABLE"


@dataclass(frozen=True)
class Pin:
    tool_id: str
    commit: str

    def __str__(self) -> str:
        return f"{self.tool_id}@{self.commit}"


def parse_pin(text: str) -> Pin:
    tool_id, sep, ref = text.partition("@")
    if not sep or not _TOOL.match(tool_id):
        raise PinError(f"{text!r} is not tool_id@<commit sha>", details={"pin": text})
    if not is_git_oid(ref):
        raise PinNotImmutable(
            f"{text!r}: a pin names a full commit sha, not {ref!r}", details={"pin": text, "ref": ref},
            hints=["resolve a release with `registry/<tool_id>/vX.Y.Z` to its commit first",
                   "branches and abbreviated shas move or collide; they are refused"])
    return Pin(tool_id=tool_id, commit=ref)


def release_tag(tool_id: str, version: str) -> str:
    if not _TOOL.match(tool_id):
        raise PinError(f"bad tool id {tool_id!r}")
    if not _SEMVER.match(version):
        raise PinError(f"release version {version!r} is not X.Y.Z", details={"version": version})
    return f"{TAG_PREFIX}{tool_id}/v{version}"


def parse_release_tag(tag: str) -> tuple[str, str]:
    m = re.match(r"^(?:refs/tags/)?registry/([a-z][a-z0-9_]*)/v(\d+\.\d+\.\d+)$", tag)
    if not m or not _SEMVER.match(m.group(2)):
        raise PinError(f"{tag!r} is not registry/<tool_id>/vX.Y.Z", details={"tag": tag})
    return m.group(1), m.group(2)
