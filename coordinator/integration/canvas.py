"""The integration canvas (admin only): one worktree at the base commit on
which accepted proposals are stacked, checkpointed and rolled back.

Only the coordinator holds this object; no worker profile ever holds an
apply, commit, merge or promote tool.

How a layer is applied (index + 3-way semantics, no porcelain):
- the canvas keeps the head tree in memory (lazily loaded from git) and a
  long-lived `git cat-file --batch` reader;
- a file whose current blob is the proposal's preimage blob gets the hunks
  applied exactly (`registry.diffs.apply_text`), the new blob is written as a
  loose object by this process;
- a file changed by an earlier layer is merged 3-way (`git merge-file` of
  base blob, current blob and the patched base blob): clean merges apply,
  overlaps are conflicts;
- anything else (renames, binary deltas) goes through `git apply --cached
  --3way` on a private index file.
After the files of a diff are worked out, the resulting tree is judged as a
whole (`coordinator.integration.tree_rules`): a path under something that is
a file or symlink on the canvas is a conflict (an order question), and a
resulting tree with an escaping symlink, a new exec bit or a gitlink is a
policy violation of the proposal that produced it, whoever wrote the rest.
A checkpoint writes the dirty trees and a commit object whose message
carries the proposal ids and digests as trailers, and points
refs/dome/runs/<run_id>/checkpoints/<n> at it. Rolling back is moving the
in-memory head to a checkpoint's tree.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import git as gitpython

from registry import diffs, limits
from registry.canonical import canonical_json, digest_json
from registry.diffs import DiffError, FilePatch, ParsedDiff

from ..persistent import PVector
from . import gitio, tree_rules
from .gitio import GitError, ObjectReader
from .policy import IntegrationPolicy
from .tree_state import CanvasError, TreeState

CHECKPOINT_REF = "refs/dome/runs/{run_id}/checkpoints/{n:04d}"
HEAD_REF = "refs/dome/runs/{run_id}/head"


@dataclass(frozen=True)
class Checkpoint:
    checkpoint_id: str
    index: int
    commit: str
    tree: str
    parent: str
    proposal_ids: tuple[str, ...]
    included: Sequence[str]  # every proposal id in this head, in stack order
    included_digest: str = ""  # digest_json(list(included)), when the canvas kept it as it went

    def to_dict(self) -> dict[str, Any]:
        """The checkpoint event's payload: its own layers by id, the head's whole stack only
        by count and digest (listing it in every checkpoint made the ledger grow as N squared;
        the stack is the checkpoint chain's proposal_ids, and the commit trailers say it too)."""
        return {"checkpoint_id": self.checkpoint_id, "index": self.index, "commit": self.commit,
                "tree": self.tree, "parent": self.parent, "proposal_ids": list(self.proposal_ids),
                "included_count": len(self.included),
                "included_digest": self.included_digest or digest_json(list(self.included))}


class StackDigest:
    """digest_json of a growing list of strings, kept as it grows: RFC 8785 writes a
    list as "[" + its items' canonical forms joined by "," + "]", so the running
    hash of the items so far gives the list's digest without serializing it again."""

    def __init__(self, items: Iterable[str] = ()) -> None:
        self._h = hashlib.sha256(b"[")
        self._n = 0
        for item in items:
            self.add(item)

    def add(self, item: str) -> None:
        self._h.update(b"," + canonical_json(item) if self._n else canonical_json(item))
        self._n += 1

    def digest(self) -> str:
        h = self._h.copy()
        h.update(b"]")
        return "sha256:" + h.hexdigest()


@dataclass
class Conflict:
    path: str
    hunk: int | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "hunk": self.hunk, "reason": self.reason}


@dataclass
class Attempt:
    """The outcome of trying a diff on the current head (nothing committed yet)."""

    changes: dict[str, tuple[str, str] | None] = field(default_factory=dict)  # path -> (mode, oid)|None
    conflicts: list[Conflict] = field(default_factory=list)
    violations: list[Any] = field(default_factory=list)  # proposals.Rejection: the resulting tree breaks policy
    method: str = "fast"

    @property
    def clean(self) -> bool:
        return not self.conflicts and not self.violations


class Canvas:
    """The integration worktree of one run."""

    def __init__(self, repo: Path | str, base_ref: str, *, run_id: str,
                 workdir: Path | str | None = None, when: int | None = None,
                 create_worktree: bool = True, max_binary_bytes: int = limits.MAX_BINARY_BYTES,
                 persist: bool = True, reader: ObjectReader | None = None,
                 policy: IntegrationPolicy | None = None) -> None:
        self.policy = policy or IntegrationPolicy(max_binary_bytes=max_binary_bytes)
        self._links: set[str] | None = None  # symlink paths of the head tree, loaded on first use
        self.repo = Path(repo)
        self.run_id = run_id
        self.base_ref = base_ref
        base_tree = gitio.tree_of(self.repo, base_ref)
        if base_tree is None:
            raise CanvasError(f"base {base_ref} is not a commit", code="CANVAS_BASE_UNKNOWN")
        self.base_tree = base_tree
        self._own_reader = reader is None
        self.reader = reader or ObjectReader(self.repo)
        if gitio.object_format(self.repo) != "sha1":
            raise CanvasError("the canvas supports sha1 repositories", code="CANVAS_OBJECT_FORMAT")
        self.store = gitio.ObjectStore(self.repo, self.reader, persist=persist)
        self.writer = self.store
        self.tree = TreeState(self.store, self.store, base_tree)
        self.head = base_ref
        self.when = when if when is not None else int(
            gitio.git_out(self.repo, "show", "-s", "--format=%ct", base_ref))
        self.max_binary_bytes = max_binary_bytes
        self.checkpoints: list[Checkpoint] = []
        # the head's stack: a checkpoint shares its prefix (a tuple each made memory grow as N
        # squared), and the digest of its canonical JSON is kept as it grows (O(1) a checkpoint)
        self.included: PVector = PVector()
        self._included_hash = StackDigest()
        self.pending_ids: list[str] = []
        self._base_cp = Checkpoint("cp-0000", 0, base_ref, base_tree, "", (), ())
        self.workdir: Path | None = None
        if create_worktree:
            # absolute: git creates the worktree from the repository, not from our cwd
            self.workdir = Path(workdir).resolve() if workdir else Path(tempfile.mkdtemp(prefix="dome-canvas-"))
            _fresh_worktree(self.repo, self.workdir, base_ref)
            # the private index lives beside the worktree, so a crash leaves nothing in the temp dir
            self._index = Path(str(self.workdir) + ".index") / "index"
            shutil.rmtree(self._index.parent, ignore_errors=True)
            self._index.parent.mkdir(parents=True)
        else:
            self._index = Path(tempfile.mkdtemp(prefix="dome-index-")) / "index"
        self._pending_refs: list[tuple[str, str]] = []

    # -- queries -----------------------------------------------------------
    @property
    def head_tree(self) -> str:
        return self.tree.root if not self.tree._dirty else self.tree.write()

    def checkpoint_by_id(self, checkpoint_id: str) -> Checkpoint:
        if checkpoint_id == self._base_cp.checkpoint_id:
            return self._base_cp
        for cp in self.checkpoints:
            if cp.checkpoint_id == checkpoint_id:
                return cp
        raise CanvasError(f"no checkpoint {checkpoint_id}", code="CANVAS_NO_CHECKPOINT")

    # -- apply -------------------------------------------------------------
    def try_apply(self, parsed: ParsedDiff) -> Attempt:
        """Work out the effect of `parsed` on the head, file by file and hunk
        by hunk where a hunk conflicts; nothing is committed."""
        att = Attempt()
        for fp in parsed.files:
            try:
                self._try_file(fp, att)
            except diffs.PatchDoesNotApply as exc:
                att.conflicts.append(Conflict(fp.path, exc.details.get("hunk"), exc.message))
            except (DiffError, GitError, CanvasError) as exc:
                att.conflicts.append(Conflict(fp.path, None, f"{exc.code}: {exc.message}"))
        if not att.conflicts:
            att.conflicts.extend(self._shape_conflicts(att))
        if not att.conflicts:
            att.violations.extend(self._tree_violations(att))
        return att

    # -- the resulting tree --------------------------------------------------
    def _after(self, att: Attempt, path: str) -> tuple[str, str] | None:
        return att.changes[path] if path in att.changes else self.tree.get(path)

    def _shape_conflicts(self, att: Attempt) -> list[Conflict]:
        """A file whose parent is a file or symlink on the canvas (or in this
        same diff), or a file where a directory stays: the tree cannot hold
        both, so whichever came second conflicts."""
        out: list[Conflict] = []
        written = sorted(p for p, v in att.changes.items() if v is not None)
        for path in written:
            parts = path.split("/")
            for k in range(1, len(parts)):
                parent = "/".join(parts[:k])
                if self._after(att, parent) is not None:
                    out.append(Conflict(path, None, f"CANVAS_PATH_IS_FILE: {parent} is a file or symlink "
                                                    "on the canvas"))
                    break
            else:
                below = [p for p in written if p.startswith(path + "/")]
                if below or (self.tree.is_dir(path) and self._dir_survives(att, path)):
                    out.append(Conflict(path, None, "CANVAS_PATH_IS_DIR: a directory holds this path "
                                                    "on the canvas"))
        return out

    def _dir_survives(self, att: Attempt, d: str) -> bool:
        entries = self.tree._entries(d) or {}
        for name, (mode, _oid) in entries.items():
            p = f"{d}/{name}"
            if mode == "040000" or att.changes.get(p, (mode, "")) is not None:
                return True
        return False

    def links(self) -> set[str]:
        """Symlink paths of the head tree."""
        if self._links is None:
            self._links = set()
            tree = self.head_tree
            self.store.flush()
            out = gitio.git(self.repo, "ls-tree", "-r", "-z", "--full-tree", tree).stdout
            for rec in out.split(b"\x00"):
                meta, _, path = rec.partition(b"\t")
                if meta.startswith(b"120000 "):
                    self._links.add(path.decode("utf-8", "surrogateescape"))
        return self._links

    def _tree_violations(self, att: Attempt) -> list[Any]:
        def is_link(e: tuple[str, str] | None) -> bool:
            return e is not None and e[0] == tree_rules.SYMLINK_MODE

        # where links resolve depends only on which paths are links and their targets:
        # an apply that adds, removes or rewrites no link cannot change any verdict
        links: set[str] = set()
        if any(is_link(v) or is_link(self.tree.get(p)) for p, v in att.changes.items()):
            links = {p for p in self.links() if p not in att.changes}
            links |= {p for p, v in att.changes.items() if is_link(v)}
        return tree_rules.tree_rejections(
            att.changes, before=self.tree.get, after=lambda p: self._after(att, p), links=links,
            read=self._blob, policy=self.policy)

    def _blob(self, oid: str) -> bytes:
        typ, data = self.store.read(oid)
        if typ != "blob":
            raise CanvasError(f"{oid} is a {typ}, not a blob", code="CANVAS_NOT_A_BLOB")
        return data

    def _current(self, path: str, att: Attempt) -> tuple[str, str] | None:
        if path in att.changes:
            return att.changes[path]
        return self.tree.get(path)

    def _try_file(self, fp: FilePatch, att: Attempt) -> None:
        if fp.is_rename or fp.copy or (fp.binary is not None and
                                       fp.binary.parts() and fp.binary.parts()[0][0] != "literal"):
            self._git_apply_file(fp, att)
            return
        if fp.is_new:
            assert fp.new_path is not None
            if self._current(fp.new_path, att) is not None or self.tree.is_dir(fp.new_path):
                raise diffs.PatchDoesNotApply("file already exists on the canvas",
                                              details={"path": fp.new_path})
            content = diffs.binary_literal(fp, self.max_binary_bytes) if fp.binary else \
                diffs.apply_text(fp, b"")
            att.changes[fp.new_path] = (fp.new_mode or "100644", self.writer.write("blob", content))
            return
        cur = self._current(fp.path, att)
        if cur is None:
            raise diffs.PatchDoesNotApply("file is missing on the canvas", details={"path": fp.path})
        mode, oid = cur
        if fp.is_deleted:
            if oid != fp.old_oid:
                raise diffs.PatchDoesNotApply("file changed since base; delete conflicts",
                                              details={"path": fp.path})
            att.changes[fp.path] = None
            return
        # like git: a mode stated only on the `index` line is the expected mode, not a change
        new_mode = fp.new_mode if fp.mode_changed else mode
        if fp.old_mode is not None and mode != fp.old_mode:
            raise diffs.PatchDoesNotApply("the file's mode on the canvas is not the one the diff states",
                                          details={"path": fp.path, "canvas": mode, "diff": fp.old_mode})
        if fp.binary is not None:
            if oid != fp.old_oid:
                raise diffs.PatchDoesNotApply("binary file changed since base", details={"path": fp.path})
            content = diffs.binary_literal(fp, self.max_binary_bytes)
            att.changes[fp.path] = (new_mode, self.writer.write("blob", content))
            return
        if not fp.hunks:
            att.changes[fp.path] = (new_mode, oid)
            return
        if oid == fp.old_oid:
            new = diffs.apply_text(fp, self._blob(oid))
            att.changes[fp.path] = (new_mode, self.writer.write("blob", new))
            return
        # an earlier layer changed this file: merge 3-way, hunk by hunk on conflict
        base = self._blob(fp.old_oid)
        ours = self._blob(oid)
        merged, ok = self._merge3(ours, base, diffs.apply_text(fp, base))
        if ok:
            att.changes[fp.path] = (new_mode, self.writer.write("blob", merged))
            return
        for k in range(len(fp.hunks)):
            sub = diffs.select(diffs.ParsedDiff((fp,)), [(fp.path, k)]).files[0]
            _, hok = self._merge3(ours, base, diffs.apply_text(sub, base))
            if not hok:
                att.conflicts.append(Conflict(fp.path, k, "overlaps a change already on the canvas"))

    def _merge3(self, ours: bytes, base: bytes, theirs: bytes) -> tuple[bytes, bool]:
        with tempfile.TemporaryDirectory(prefix="dome-merge-") as tmp:
            paths = []
            for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
                p = Path(tmp) / name
                p.write_bytes(data)
                paths.append(str(p))
            proc = gitio.git(self.repo, "merge-file", "-p", "--quiet", *paths, check=False)
            if proc.returncode < 0 or proc.returncode > 127:
                raise GitError("git merge-file failed", details={"rc": proc.returncode})
            return proc.stdout, proc.returncode == 0

    def _git_apply_file(self, fp: FilePatch, att: Attempt) -> None:
        """The general path: `git apply --cached --3way` on a private index."""
        tree = self._tree_with(att)
        self.store.flush()
        env = {"GIT_INDEX_FILE": str(self._index)}
        gitio.git(self.repo, "read-tree", tree, env=env)
        patch = diffs.serialize_diff(diffs.ParsedDiff((fp,)))
        proc = gitio.git(self.repo, "apply", "--cached", "--3way", "--whitespace=nowarn", "-",
                         input=patch, env=env, check=False)
        if proc.returncode != 0:
            raise diffs.PatchDoesNotApply(proc.stderr.decode("utf-8", "replace").strip()[:300],
                                          details={"path": fp.path})
        for p in fp.paths:
            out = gitio.git_out(self.repo, "ls-files", "-s", "--", p, env=env)
            if not out:
                att.changes[p] = None
                continue
            meta, _, _name = out.partition("\t")
            mode, oid, stage = meta.split(" ")
            att.changes[p] = (mode, oid)
        att.method = "three_way"

    def _tree_with(self, att: Attempt) -> str:
        saved = (dict(self.tree._dirs), dict(self.tree._clean), set(self.tree._dirty), self.tree.root)
        saved_dirs = {k: dict(v) for k, v in self.tree._dirs.items()}
        try:
            self._commit_changes(att)
            return self.tree.write()
        finally:
            self.tree._dirs, self.tree._clean, self.tree._dirty, self.tree.root = (
                saved_dirs, saved[1], saved[2], saved[3])

    def _commit_changes(self, att: Attempt) -> None:
        for path, val in sorted(att.changes.items()):
            if val is None:
                self.tree.remove(path)
            else:
                self.tree.set(path, *val)

    def commit(self, att: Attempt, proposal_ids: Iterable[str]) -> None:
        """Make a clean attempt part of the head (checkpointed later)."""
        if not att.clean:
            raise CanvasError("cannot commit a conflicting attempt", code="CANVAS_CONFLICT")
        self._commit_changes(att)
        if self._links is not None:
            for path, val in att.changes.items():
                if val is not None and val[0] == tree_rules.SYMLINK_MODE:
                    self._links.add(path)
                else:
                    self._links.discard(path)
        for pid in proposal_ids:
            self.included = self.included.append(pid)
            self._included_hash.add(pid)
            self.pending_ids.append(pid)

    def checkpoint(self, trailers: Mapping[str, str | list[str]], label: str = "") -> Checkpoint:
        """A commit of the current head with `trailers`; a ref points at it."""
        tree = self.tree.write()
        n = len(self.checkpoints) + 1
        cp_id = f"cp-{n:04d}"
        lines = [label or f"dome: checkpoint {cp_id}", ""]
        lines.append(f"Dome-Run: {self.run_id}")
        lines.append(f"Dome-Checkpoint: {cp_id}")
        lines.append(f"Dome-Base-Ref: {self.base_ref}")
        for k, v in trailers.items():
            for item in ([v] if isinstance(v, str) else v):
                lines.append(f"{k}: {item}")
        msg = "\n".join(lines) + "\n"
        commit = self.writer.write("commit", gitio.format_commit(tree, [self.head], msg,
                                                                  when=self.when))
        cp = Checkpoint(cp_id, n, commit, tree, self.head, tuple(self.pending_ids),
                        self.included, self._included_hash.digest())
        self._pending_refs.append((CHECKPOINT_REF.format(run_id=self.run_id, n=n), commit))
        self.checkpoints.append(cp)
        self.head = commit
        self.pending_ids = []
        return cp

    def rollback(self, checkpoint_id: str) -> Checkpoint:
        """Make a checkpoint the head again; later checkpoints stay as refs
        (they are evidence) but are no longer part of the stack."""
        cp = self.checkpoint_by_id(checkpoint_id)
        self.tree.reset(cp.tree)
        self._links = None
        self.head = cp.commit
        self.included = PVector(cp.included)
        self._included_hash = StackDigest(cp.included)
        self.pending_ids = []
        return cp

    def flush_refs(self) -> None:
        """Write the checkpoint refs taken since the last flush (one git call)."""
        if not self._pending_refs:
            return
        self.store.flush()
        lines = ["start"] + [f"update {ref} {oid}" for ref, oid in self._pending_refs] + ["commit"]
        gitio.git(self.repo, "update-ref", "--stdin", input=("\n".join(lines) + "\n").encode())
        self._pending_refs = []

    def publish_head(self) -> str:
        self._pending_refs.append((HEAD_REF.format(run_id=self.run_id), self.head))
        self.flush_refs()
        return self.head

    def close(self, remove_worktree: bool = True) -> None:
        self.flush_refs()
        self.store.flush()
        if self._own_reader:
            self.reader.close()
        shutil.rmtree(self._index.parent, ignore_errors=True)
        if remove_worktree and self.workdir is not None:
            gitio.git(self.repo, "worktree", "remove", "--force", str(self.workdir), check=False)
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "Canvas":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fresh_worktree(repo: Path, workdir: Path, base_ref: str) -> None:
    """A new detached worktree at `workdir`, replacing whatever a killed
    coordinator left there (the directory, and its registration in the repo)."""
    if workdir.exists():
        gitio.git(repo, "worktree", "remove", "--force", str(workdir), check=False)
        shutil.rmtree(workdir, ignore_errors=True)
    # --force: the path may still be registered although its directory is gone
    gitpython.Repo(repo).git.worktree("add", "--force", "--detach", "--no-checkout", str(workdir), base_ref)


def checkout_readonly(repo: Path | str, commit: str, dest: Path) -> Path:
    """A plain (no .git) checkout of `commit` at `dest`, files made read-only."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dome-ro-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        gitio.git(repo, "read-tree", commit, env=env)
        gitio.git(repo, f"--work-tree={dest}", "checkout-index", "-a", "-f", env=env)
    for root, dirs, files in os.walk(dest):
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode & ~0o222)
    return dest
