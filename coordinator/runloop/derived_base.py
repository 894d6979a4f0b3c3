"""Bases for dependent tasks: the run base plus what their dependencies produced.

A task that depends on others usually needs to see their output (a DRC run
needs the mask its optimize task wrote). Before dispatching such a task the
coordinator builds a *derived base*: a real commit whose parent is the run
base and whose tree is the base tree with the winning proposals of every
(transitive) dependency applied, in a deterministic order. The worker checks
out that commit exactly as it would the run base; the derivation is recorded
as a `task.base_derived` event so an auditor can rebuild it.

`plan_derived_base` decides (pure); `build_derived_base` does the git work on
a private index, so the repository's own index and worktree are untouched.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from registry.errors import DomeError

# Fixed identity and dates: the same inputs give the same commit id.
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "dome", "GIT_AUTHOR_EMAIL": "dome@localhost",
    "GIT_COMMITTER_NAME": "dome", "GIT_COMMITTER_EMAIL": "dome@localhost",
    "GIT_AUTHOR_DATE": "1970-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "1970-01-01T00:00:00Z",
}


class DerivedBaseError(DomeError):
    code = "DERIVED_BASE_FAILED"
    retry = "none"


@dataclass(frozen=True)
class DerivedBase:
    base_ref: str
    base_tree_hash: str
    parent: str
    applied: tuple[tuple[str, str], ...]  # (proposal_id, diff_digest), in apply order

    def to_event(self, node_id: str) -> dict:
        return {"node_id": node_id, "base_ref": self.base_ref, "base_tree_hash": self.base_tree_hash,
                "parent": self.parent, "base_source": "dependencies",
                "applied": [{"proposal_id": p, "diff_digest": d} for p, d in self.applied]}


def transitive_dependencies(node_id: str, deps: Mapping[str, Sequence[str]]) -> list[str]:
    """Every ancestor of node_id, in a deterministic topological order."""
    seen: set[str] = {node_id}  # a cycle never makes a node its own ancestor
    order: list[str] = []

    def visit(n: str) -> None:
        for d in sorted(deps.get(n, ())):
            if d not in seen:
                seen.add(d)
                visit(d)
                order.append(d)

    visit(node_id)
    return order


def plan_derived_base(node_id: str, deps: Mapping[str, Sequence[str]],
                      winners: Mapping[str, Mapping]) -> list[Mapping]:
    """The proposals to apply for node_id: the winning proposal of each
    ancestor that produced one, ancestors first (pure)."""
    return [winners[d] for d in transitive_dependencies(node_id, deps) if d in winners]


def _git(repo: Path, args: Iterable[str], *, env: Mapping[str, str], data: bytes | None = None) -> str:
    r = subprocess.run(["git", *args], cwd=repo, input=data, capture_output=True,
                       env={**os.environ, **_GIT_ENV, **env})
    if r.returncode != 0:
        raise DerivedBaseError(f"git {' '.join(args)} failed",
                               details={"stderr": r.stderr.decode(errors="replace")[-2000:]})
    return r.stdout.decode().strip()


def build_derived_base(repo: Path, base_sha: str, proposals: Sequence[Mapping],
                       load_diff: Callable[[Mapping], bytes | None], *, ref_name: str) -> DerivedBase:
    """Apply `proposals` (in order) on base_sha in a private index and commit.

    The commit is kept alive by `ref_name` (under refs/dome/) so git gc never
    drops a base that an attempt checked out.
    """
    applied: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="dome-derive-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git(repo, ["read-tree", base_sha], env=env)
        for p in proposals:
            diff = load_diff(p)
            if diff is None:
                raise DerivedBaseError(f"diff of proposal {p.get('proposal_id')} is not available",
                                       details={"proposal_id": p.get("proposal_id")})
            if diff.strip():
                _git(repo, ["apply", "--cached", "--binary", "--whitespace=nowarn", "-"], env=env, data=diff)
            applied.append((str(p.get("proposal_id")), str(p.get("diff_digest"))))
        tree = _git(repo, ["write-tree"], env=env)
        message = "dome: derived base\n\n" + "".join(f"Dome-Applied: {pid} {dg}\n" for pid, dg in applied)
        sha = _git(repo, ["commit-tree", tree, "-p", base_sha, "-m", message], env=env)
    _git(repo, ["update-ref", ref_name, sha], env={})
    return DerivedBase(base_ref=sha, base_tree_hash=tree, parent=base_sha, applied=tuple(applied))
