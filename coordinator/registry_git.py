"""Git as the tool registry backend: resolve pins, tag and resolve releases.

`tool_id@<sha>` pins are resolved by reading the tool's contract at that
exact commit (`git show <sha>:registry/tools/<tool_id>/spec/contract.json`).
Releases are annotated tags `registry/<tool_id>/vX.Y.Z`; a release can be
created only when the contract at that commit declares that version, and an
existing release tag is never moved.
"""
from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from registry.canonical import digest_json
from registry.errors import DomeError
from registry.pins import Pin, PinError, parse_pin, parse_release_tag, release_tag

REGISTRY_PREFIX = "registry"


class RegistryGitError(DomeError):
    code = "REGISTRY_GIT_ERROR"


class PinNotFound(RegistryGitError):
    code = "PIN_NOT_FOUND"


class ReleaseExists(RegistryGitError):
    code = "RELEASE_EXISTS"


class ReleaseVersionMismatch(RegistryGitError):
    code = "RELEASE_VERSION_MISMATCH"


class ReleaseNotFound(RegistryGitError):
    code = "RELEASE_NOT_FOUND"


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RegistryGitError(f"git {' '.join(args)} failed: {proc.stderr.strip()}",
                               details={"args": list(args), "stderr": proc.stderr.strip()})
    return proc


@dataclass(frozen=True)
class ResolvedTool:
    pin: Pin
    contract: dict[str, Any]
    digest: str

    @property
    def version(self) -> str:
        return str(self.contract.get("version"))


def _contract_path(tool_id: str, prefix: str) -> str:
    return f"{prefix}/tools/{tool_id}/spec/contract.json"


def resolve_pin(repo: Path, pin: str | Pin, *, prefix: str = REGISTRY_PREFIX) -> ResolvedTool:
    """The contract of `tool_id@<sha>` at exactly that commit."""
    p = parse_pin(pin) if isinstance(pin, str) else pin
    if _git(repo, "cat-file", "-e", f"{p.commit}^{{commit}}", check=False).returncode != 0:
        raise PinNotFound(f"{p}: no such commit in {repo}", details={"pin": str(p)})
    proc = _git(repo, "show", f"{p.commit}:{_contract_path(p.tool_id, prefix)}", check=False)
    if proc.returncode != 0:
        raise PinNotFound(f"{p}: the commit has no contract for {p.tool_id!r}", details={"pin": str(p)})
    doc = json.loads(proc.stdout)
    return ResolvedTool(pin=p, contract=doc, digest=digest_json(doc))


def tag_release(repo: Path, tool_id: str, *, commit: str = "HEAD", version: str | None = None,
                prefix: str = REGISTRY_PREFIX) -> tuple[str, Pin]:
    """Create the annotated tag registry/<tool_id>/vX.Y.Z at `commit`."""
    sha = _git(repo, "rev-parse", "--verify", f"{commit}^{{commit}}").stdout.strip()
    tool = resolve_pin(repo, f"{tool_id}@{sha}", prefix=prefix)
    version = version or tool.version
    if tool.version != version:
        raise ReleaseVersionMismatch(f"the contract at {sha[:12]} is version {tool.version}, not {version}",
                                     details={"tool_id": tool_id, "contract_version": tool.version, "version": version})
    tag = release_tag(tool_id, version)
    existing = _git(repo, "rev-parse", "--verify", "-q", f"refs/tags/{tag}^{{commit}}", check=False)
    if existing.returncode == 0:
        if existing.stdout.strip() == sha:
            return tag, tool.pin
        raise ReleaseExists(f"{tag} already names {existing.stdout.strip()[:12]}; releases never move",
                            details={"tag": tag}, hints=["bump the contract version and tag that"])
    _git(repo, "tag", "-a", tag, sha, "-m", f"{tool_id} {version} ({tool.digest})")
    return tag, tool.pin


def resolve_release(repo: Path, tool_id: str, version: str) -> Pin:
    tag = release_tag(tool_id, version)
    proc = _git(repo, "rev-parse", "--verify", "-q", f"refs/tags/{tag}^{{commit}}", check=False)
    if proc.returncode != 0:
        raise ReleaseNotFound(f"no release {tag}", details={"tag": tag})
    return Pin(tool_id=tool_id, commit=proc.stdout.strip())


def list_releases(repo: Path, tool_id: str | None = None) -> list[tuple[str, str, Pin]]:
    """(tool_id, version, pin) of every release tag, sorted."""
    out = []
    for tag in _git(repo, "tag", "--list", "registry/*").stdout.split():
        try:
            tid, ver = parse_release_tag(tag)
        except PinError:
            continue
        if tool_id is None or tid == tool_id:
            out.append((tid, ver, resolve_release(repo, tid, ver)))
    return sorted(out, key=lambda r: (r[0], tuple(int(x) for x in r[1].split("."))))
