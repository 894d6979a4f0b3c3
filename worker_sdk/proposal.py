"""Build a PatchProposal (dome.patch_proposal/v1) from a scratch checkout.

Everything the handler left changed in the checkout (new, modified, deleted,
binary, mode changes) is staged with `git add -A` and diffed against the
exact base commit with `git diff --cached --binary --full-index`; the diff
is canonicalized by `registry.diffs` (the same code the coordinator uses to
recompute it), so `diff_digest`, `touched_files` and `hunk_fingerprints`
match on both sides byte for byte.

The checkout's own `.git` belongs to the action, which may have planted
hooks, `core.fsmonitor`, `include.path`, filters or an external diff in its
config: git would run those here, in the runtime, outside the action's
Landlock domain. So the diff is computed with a git directory made fresh
for it after the action ended (config written by us, no hooks, objects of
the read-only base repository borrowed as alternates), pointed at the
checkout as a bare work tree; system and global config are off and hooks
and fsmonitor are disabled on the command line as well.
"""
from __future__ import annotations

import datetime as _dt
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from registry.canonical import digest_json
from registry.diffs import DIFF_GIT_ARGS, describe_diff
from registry.sealing import seal

from .checkout import BaseCheckout, quick_diff
from .gitdir import init_git_dir

LOCKFILES = ("package-lock.json", "poetry.lock", "Cargo.lock", "uv.lock", "requirements.txt",
             "pyproject.toml", "go.sum", "yarn.lock", "Pipfile.lock", "setup.py", "setup.cfg")


# what no repository config may turn on for the runtime's own git
SAFE_GIT_OPTIONS = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.untrackedCache=false",
                    "-c", "diff.external=", "-c", "core.pager=cat", "-c", "core.sshCommand=false",
                    "-c", "protocol.allow=never")
GIT_TIMEOUT_S = 600


def _git(git_dir: Path, work_tree: Path, *args: str) -> bytes:
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_ATTR_NOSYSTEM": "1",
           "GIT_DIR": str(git_dir), "GIT_WORK_TREE": str(work_tree), "HOME": str(git_dir),
           "GIT_TERMINAL_PROMPT": "0", "PATH": "/usr/bin:/bin", "LC_ALL": "C"}
    return subprocess.run(["git", *SAFE_GIT_OPTIONS, *args], cwd=work_tree, check=True, capture_output=True,
                          env=env, timeout=GIT_TIMEOUT_S).stdout


def base_objects(scratch: Path) -> Path:
    """The object store holding the base commit: the read-only base repository
    the sandbox binds ($DOME_BASE_GIT), else the checkout's own (tests, --sandbox none)."""
    base_git = os.environ.get("DOME_BASE_GIT")
    root = Path(base_git) if base_git else scratch / ".git"
    return root / "objects" if (root / "objects").is_dir() else root


def canonical_worktree_diff(scratch: Path, base_ref: str, objects: Path | None = None,
                            base_index: tuple[bytes, int] | None = None) -> bytes:
    """Raw `git diff --binary --full-index` of the checkout's changes against base_ref,
    computed with a fresh private git directory (the checkout's .git is never read).
    It sits beside the checkout, under the scratch quota, where the action cannot write.
    `base_index`: the index file of the base checkout as the runtime's own checkout wrote it,
    read before the action ran (so the action could not touch it), and its mtime: its stat
    data lets `git add` skip every file the action left alone, and no `read-tree` is needed."""
    with tempfile.TemporaryDirectory(prefix=".dome-diff-", dir=scratch.parent) as tmp:
        git_dir = Path(tmp) / "git"
        init_git_dir(git_dir, bare=True, alternates=objects or base_objects(scratch))
        if base_index is not None:
            data, mtime_ns = base_index
            (git_dir / "index").write_bytes(data)
            # with the checkout's own mtime: git takes every entry written in that same second as
            # racily clean and compares its content, so an edit that kept a file's size and second
            # is still seen (git compares whole seconds)
            os.utime(git_dir / "index", ns=(mtime_ns, mtime_ns))
        else:
            _git(git_dir, scratch, "-c", "core.bare=false", "read-tree", base_ref)
        _git(git_dir, scratch, "-c", "core.bare=false", "add", "-A")
        args = list(DIFF_GIT_ARGS)
        args.insert(1, "--cached")
        return _git(git_dir, scratch, "-c", "core.bare=false", *args, base_ref, "--")


def _risk(touched: list[str], stats: dict[str, int], declared: str | None) -> dict[str, Any]:
    deps = any(Path(p).name in LOCKFILES for p in touched)
    surface = int(stats.get("added", 0)) + int(stats.get("removed", 0))
    # the size rule is the coordinator's (its policy says where it lies, and records why it fired)
    level = declared or ("medium" if deps else "low")
    return {"class": level, "surface_area": surface, "files_touched": len(touched), "deps_touched": deps,
            "migration": any("migration" in p for p in touched)}


def build_proposal(scratch: Path, *, spawn: dict[str, Any], profile: dict[str, Any],
                   intent_tags: list[str] | None = None, declared_constraints: dict[str, Any] | None = None,
                   risk: str | None = None, budgets_used: dict[str, Any] | None = None,
                   exit_code: int | None = None, upload: Any = None,
                   base: BaseCheckout | None = None) -> tuple[dict[str, Any], bytes] | None:
    """(proposal, canonical diff bytes), or None when the checkout is unchanged.

    `upload(canonical_bytes) -> digest` stores the diff (the gateway's
    put_artifact); its digest becomes `diff_ref`. `base`: what the runtime's checkout wrote, before
    the action ran: the diff is computed from it without git where it can be (worker_sdk.checkout),
    else by git from its index (canonical_worktree_diff)."""
    base_ref = spawn["base_ref"]
    raw = quick_diff(scratch, base) if base is not None else None
    if raw is None:
        raw = canonical_worktree_diff(scratch, base_ref, base_index=base.index) if base is not None \
            else canonical_worktree_diff(scratch, base_ref)
    if not raw.strip():
        return None
    d = describe_diff(raw, base_ref)
    canonical: bytes = d["canonical"]
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    meta = {
        "tool_profile_id": profile["profile_id"], "run_id": spawn["run_id"], "wave_id": spawn["wave_id"],
        "node_id": spawn["node_id"], "node_execution_id": spawn["node_execution_id"],
        "intent": spawn["action_spec"]["intent"], "budgets_used": budgets_used or {},
    }
    if exit_code is not None:
        meta["exit_code"] = exit_code
    proposal = {
        "artifact_kind": "dome.patch_proposal/v1", "version": "1.0.0",
        "run_id": spawn["run_id"], "wave_id": spawn["wave_id"], "node_id": spawn["node_id"],
        "node_execution_id": spawn["node_execution_id"],
        "created_at": now, "producer": "worker_sdk",
        "base_ref": base_ref, "base_tree_hash": spawn["base_tree_hash"],
        "determinism_seed": spawn["determinism_seed"], "inputs_hash": spawn["inputs_hash"],
        "diff_canonicalization": d["diff_canonicalization"], "diff_digest": d["diff_digest"],
        "touched_files": d["touched_files"],
        # range_hint is optional in the schema: whole-file fingerprints (binary, new files) omit it
        "hunk_fingerprints": [{k: v for k, v in fp.items() if not (k == "range_hint" and v is None)}
                              for fp in d["hunk_fingerprints"]],
        "intent_tags": list(intent_tags or []), "risk": _risk(d["touched_files"], d["stats"], risk),
        "declared_constraints": dict(declared_constraints or {}), "worker_run_meta": meta,
    }
    # content-derived id: the same attempt and diff always give the same proposal_id
    pid = "pp-" + digest_json({"neid": spawn["node_execution_id"], "diff": d["diff_digest"]})[7:31]
    proposal["proposal_id"] = pid
    proposal["object_id"] = pid
    if upload is not None:
        proposal["diff_ref"] = upload(canonical)
    proposal = seal(proposal)  # payload_digest + canonicalization, the registry's one rule
    return proposal, canonical
