"""PatchProposal verification: the cheap gates before anything is stacked.

`check_proposal` is pure: it takes the proposal record, the diff bytes, the
facts the shell looked up in git (`BaseFacts`) and the policy, and returns
every Rejection it finds (each with its own code). `verify_proposal` is the
shell: it gathers the facts from a real repository (including an apply-check
against the exact base commit) and calls the pure core.
"""
from __future__ import annotations

import posixpath
import re
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from registry import diffs
from registry.canonical import digest_bytes
from registry.gitoid import is_git_oid
from registry.diffs import DiffError, FilePatch, ParsedDiff
from registry.errors import DomeError

from .policy import IntegrationPolicy, RiskRise, globs_matcher, max_risk, risk_level, size_rise
from .validation_inputs import changed_inputs

if TYPE_CHECKING:
    from .gitio import ObjectReader

ALLOWED_MODES = {"100644", "100755", "120000"}
GITLINK_MODE = "160000"

# reason classes used by the StackPlan's rejected[]
POLICY, CONFLICT, REDUNDANT, INTEGRITY = "policy", "conflict", "redundant", "integrity"


@dataclass(frozen=True)
class Rejection:
    code: str
    message: str
    reason: str = POLICY  # policy | integrity | conflict | redundant
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "reason": self.reason,
                "details": dict(self.details)}


class ProposalRejected(DomeError):
    """A proposal failed verification; `details["rejections"]` lists every reason."""

    code = "PROPOSAL_REJECTED"

    def __init__(self, proposal_id: str, rejections: list[Rejection]) -> None:
        first = rejections[0]
        super().__init__(f"proposal {proposal_id} rejected: {first.code}: {first.message}",
                         code=first.code,
                         details={"proposal_id": proposal_id,
                                  "rejections": [r.to_dict() for r in rejections]})
        self.rejections = rejections


@dataclass(frozen=True)
class BaseFacts:
    """What the shell found in git for a proposal's base."""

    commit_exists: bool
    tree_hash: str | None
    apply_check_ok: bool | None = None  # None: not run (diff did not parse)
    apply_check_error: str = ""
    base_symlinks: frozenset[str] = frozenset()
    base_oids: Mapping[str, str] = field(default_factory=dict)  # path -> blob oid at base
    base_modes: Mapping[str, str] = field(default_factory=dict)  # path -> mode at base


class DiffReloadError(DomeError):
    """A released proposal's canonical diff, read back from the blob store, is not the one checked."""

    code = "PROPOSAL_DIFF_RELOAD_MISMATCH"


@dataclass(frozen=True)
class CheckedProposal:
    """A proposal that passed every gate. Its canonical diff is held in memory until
    `released`: from then on only what the plan needs stays (touched files, fingerprints,
    risk) and the diff is read back from the blob store, digest re-checked, when a step
    applies it, so the integration's memory does not grow with the proposals' count."""

    proposal: Mapping[str, Any]
    held: bytes | None  # the canonical diff, until released
    touched: tuple[str, ...]
    fingerprints: tuple[Mapping[str, Any], ...]
    protected: tuple[str, ...] = ()  # touched paths the policy protects
    size: RiskRise | None = None  # the policy's size rule, when this diff is over it
    inputs_changed: tuple[str, ...] = ()  # base files it modifies, removes or renames that a required suite reads
    diff_blob: str | None = None  # where the canonical diff is stored, once released
    blob_get: Callable[[str], bytes] | None = field(default=None, compare=False, repr=False)

    @property
    def proposal_id(self) -> str:
        return str(self.proposal["proposal_id"])

    def released(self, diff_blob: str, blob_get: Callable[[str], bytes]) -> "CheckedProposal":
        """The same proposal without its diff in memory (read back from `diff_blob` when needed)."""
        return replace(self, held=None, diff_blob=diff_blob, blob_get=blob_get)

    @property
    def canonical(self) -> bytes:
        """The canonical diff bytes: held, or read back from the blob store; either way
        they must still hash to the digest every gate checked."""
        if self.held is not None:
            return self.held
        if self.diff_blob is None or self.blob_get is None:
            raise DiffReloadError(f"proposal {self.proposal_id}: its diff is neither held nor stored",
                                  details={"proposal_id": self.proposal_id})
        raw = self.blob_get(self.diff_blob)
        if digest_bytes(raw) != self.diff_digest:
            raise DiffReloadError(f"proposal {self.proposal_id}: the stored diff does not hash to the "
                                  "checked digest", details={"proposal_id": self.proposal_id,
                                                             "diff_blob": self.diff_blob})
        return raw

    @property
    def parsed(self) -> ParsedDiff:
        """The canonical diff parsed anew (nothing parsed is kept); its re-serialization
        must be the checked bytes, so what is applied is what was checked."""
        raw = self.canonical
        parsed = diffs.parse_diff(raw)
        if diffs.serialize_diff(parsed) != raw:
            raise DiffReloadError(f"proposal {self.proposal_id}: the canonical diff does not parse back "
                                  "to itself", details={"proposal_id": self.proposal_id})
        return parsed

    @property
    def rises(self) -> tuple[RiskRise, ...]:
        """Each rule that raised the computed risk, with its figures."""
        out = [RiskRise("protected_paths", "high", {"paths": list(self.protected)})] if self.protected else []
        if self.inputs_changed:  # the base's tests, fixtures, decks... judge the change: changing them is high
            out.append(RiskRise("validation_inputs", "high", {"paths": list(self.inputs_changed)}))
        return tuple([*out, *([self.size] if self.size is not None else [])])

    @property
    def computed_risk(self) -> str:
        """What the coordinator makes of the diff itself."""
        return max_risk(*(r.raises_to for r in self.rises))

    @property
    def risk(self) -> str:
        """The proposal's risk (already raised to its task's declared risk) or the
        computed one, whichever is higher: a worker can raise it, never lower it."""
        return max_risk(self.proposal.get("risk"), self.computed_risk)

    @property
    def diff_digest(self) -> str:
        return str(self.proposal["diff_digest"])


# ---------------------------------------------------------------------------
# pure checks


def _declared(constraints: Any) -> set[str]:
    if isinstance(constraints, Mapping):
        return {str(k).replace("-", "_").replace(" ", "_").lower() for k, v in constraints.items() if v}
    if isinstance(constraints, (list, tuple)):
        return {str(k).replace("-", "_").replace(" ", "_").lower() for k in constraints}
    return set()


# code points HFS+ ignores when it compares names (git's is_hfs_dotgit list)
_HFS_IGNORED = dict.fromkeys([*range(0x200C, 0x2010), *range(0x202A, 0x202F), *range(0x206A, 0x2070),
                              0xFEFF])


def is_git_dir_name(name: str) -> bool:
    """Is this one path component a name git treats as its own `.git`
    directory on some filesystem: any case (`.GIT`), trailing dots or spaces
    (NTFS), the 8.3 short name `git~1`, or HFS+-ignored code points inside.
    `.gitignore`, `.github` and `.gitattributes` are ordinary names."""
    low = name.translate(_HFS_IGNORED).lower().rstrip(". ")
    return low in (".git", "git~1")


def path_rejections(path: str) -> list[Rejection]:
    """Forbidden-path rules for one repo-relative path."""
    out: list[Rejection] = []
    d = {"path": path}
    if not path or "\x00" in path or "\\" in path:
        out.append(Rejection("POLICY_PATH_INVALID", "empty path, NUL or backslash in path", details=d))
        return out
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        out.append(Rejection("POLICY_PATH_ABSOLUTE", "absolute path", details=d))
    parts = path.split("/")
    if any(p == ".." for p in parts):
        out.append(Rejection("POLICY_PATH_TRAVERSAL", "path climbs out with '..'", details=d))
    if any(p in ("", ".") for p in parts[1:] if True) or parts[0] == ".":
        out.append(Rejection("POLICY_PATH_INVALID", "path is not normalized", details=d))
    for p in parts:
        if is_git_dir_name(p):
            out.append(Rejection("POLICY_PATH_GIT_DIR", "path enters a .git directory", details=d))
            break
    if parts[-1] == ".gitmodules":
        out.append(Rejection("POLICY_GITLINK", ".gitmodules changes are submodule changes", details=d))
    return out


def _symlink_target(fp: FilePatch) -> bytes | None:
    if fp.new_mode != "120000" or fp.new_path is None:
        return None
    if fp.binary is not None:
        return b"\x00binary"  # never a sane link target
    post: list[bytes] = []
    for h in fp.hunks:
        post.extend(h.postimage())
    return b"\n".join(post)


def _symlink_rejections(fp: FilePatch, policy: IntegrationPolicy) -> list[Rejection]:
    target = _symlink_target(fp)
    if target is None:
        return []
    d = {"path": fp.new_path, "target": target.decode("utf-8", "replace")}
    if not policy.allow_symlinks:
        return [Rejection("POLICY_SYMLINK_FORBIDDEN", "symlinks are not allowed", details=d)]
    t = target.decode("utf-8", "surrogateescape")
    if not fp.hunks and fp.binary is None:
        return []  # mode change only: the target is content already in the tree; the canvas judges it (tree_rules)
    if not t or "\x00" in t or t.startswith("/") or "\\" in t:
        return [Rejection("POLICY_SYMLINK_ESCAPE", "symlink target is absolute or invalid", details=d)]
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(fp.new_path or ""), t))
    if joined == ".." or joined.startswith("../") or joined.startswith("/"):
        return [Rejection("POLICY_SYMLINK_ESCAPE", "symlink points outside the repository", details=d)]
    if any(is_git_dir_name(p) for p in joined.split("/")):
        return [Rejection("POLICY_SYMLINK_ESCAPE", "symlink points into .git", details=d)]
    return []


def _file_type(mode: str) -> int:
    return int(mode, 8) & 0o170000


def _mode_rejections(fp: FilePatch, policy: IntegrationPolicy,
                     base_modes: Mapping[str, str] | None = None) -> list[Rejection]:
    out: list[Rejection] = []
    base_mode = (base_modes or {}).get(fp.old_path) if fp.old_path is not None else None
    if base_mode is not None and fp.old_mode is not None and fp.old_mode != base_mode:
        # a mode stated only on the `index` line (or an `old mode` that is not the base's):
        # the canvas would end with the stated mode, so it is judged like a mode change
        d = {"path": fp.old_path, "stated_mode": fp.old_mode, "base_mode": base_mode}
        if fp.old_mode == "100755" and not policy.allow_exec_bit:
            out.append(Rejection("POLICY_MODE_EXEC", "the diff states an executable mode the base file does "
                                 "not have", details=d))
        else:
            out.append(Rejection("PROPOSAL_MODE_MISMATCH", "the diff states a mode the base file does not have",
                                 INTEGRITY, d))
    if fp.mode_changed and _file_type(fp.old_mode) != _file_type(fp.new_mode):  # type: ignore[arg-type]
        # git refuses this too ("new mode does not match old mode"): a type change is a delete and a create
        out.append(Rejection("POLICY_MODE_TYPE_CHANGE", "one section changes the file's type",
                             details={"path": fp.path, "old_mode": fp.old_mode, "new_mode": fp.new_mode}))
    for mode in {m for m in (fp.old_mode, fp.new_mode) if m is not None}:
        d = {"path": fp.path, "mode": mode}
        if mode == GITLINK_MODE:
            out.append(Rejection("POLICY_GITLINK", "submodule (gitlink) change", details=d))
        elif int(mode, 8) & 0o7000:
            out.append(Rejection("POLICY_MODE_SETUID", "setuid/setgid/sticky bits are never allowed",
                                 details=d))
        elif mode not in ALLOWED_MODES:
            out.append(Rejection("POLICY_MODE_INVALID", f"file mode {mode} is not a git file mode",
                                 details=d))
    new = fp.new_mode
    becomes_exec = new == "100755" and (fp.old_mode != "100755")
    if becomes_exec and not policy.allow_exec_bit:
        out.append(Rejection("POLICY_MODE_EXEC", "the executable bit is not allowed by policy",
                             details={"path": fp.new_path, "mode": new}))
    return out


def is_dependency_file(path: str, policy: IntegrationPolicy) -> bool:
    base = posixpath.basename(path)
    hit = globs_matcher(tuple(policy.dependency_globs))  # `**/x` also names x at the top, as for protected paths
    return hit(base) or hit(path)


def check_policy(parsed: ParsedDiff, proposal: Mapping[str, Any], policy: IntegrationPolicy,
                 *, canonical_size: int = 0,
                 base_symlinks: Iterable[str] = (),
                 base_modes: Mapping[str, str] | None = None) -> list[Rejection]:
    """Every policy rejection of a parsed diff (pure)."""
    out: list[Rejection] = []
    links = set(base_symlinks)
    if len(parsed.files) > policy.max_files:
        out.append(Rejection("POLICY_TOO_MANY_FILES", "too many files in one proposal",
                             details={"files": len(parsed.files), "limit": policy.max_files}))
    total = 0
    deps: list[str] = []
    for fp in parsed.files:
        for p in fp.paths:
            out.extend(path_rejections(p))
            parents = p.split("/")[:-1]
            for k in range(1, len(parents) + 1):
                if "/".join(parents[:k]) in links:
                    out.append(Rejection("POLICY_PATH_THROUGH_SYMLINK",
                                         "path goes through a symlink of the base",
                                         details={"path": p, "symlink": "/".join(parents[:k])}))
                    break
            if is_dependency_file(p, policy):
                deps.append(p)
        out.extend(_mode_rejections(fp, policy, base_modes))
        out.extend(_symlink_rejections(fp, policy))
        if fp.binary is not None:
            if not policy.allow_binary:
                out.append(Rejection("POLICY_BINARY_FORBIDDEN", "binary changes are not allowed",
                                     details={"path": fp.path}))
            size = max(fp.binary.declared_sizes or [0])
            if fp.binary.parts() and fp.binary.parts()[0][0] == "literal":
                size = fp.binary.forward_size
            if size > policy.max_binary_bytes:
                out.append(Rejection("POLICY_BINARY_TOO_LARGE", "binary file over the size limit",
                                     details={"path": fp.path, "bytes": size,
                                              "limit": policy.max_binary_bytes}))
            else:
                try:
                    diffs.binary_literal_size(fp.binary, policy.max_binary_bytes)
                except DiffError as exc:
                    out.append(Rejection("POLICY_BINARY_TOO_LARGE" if exc.code == "DIFF_BINARY_TOO_LARGE"
                                         else "PROPOSAL_DIFF_MALFORMED", exc.message,
                                         reason=POLICY if exc.code == "DIFF_BINARY_TOO_LARGE" else INTEGRITY,
                                         details={"path": fp.path}))
            total += size
        for h in fp.hunks:
            total += sum(len(ln) for ln in h.lines if ln[:1] == b"+")
    total = max(total, canonical_size)
    if total > policy.max_total_bytes:
        out.append(Rejection("POLICY_DIFF_TOO_LARGE", "proposal over the total size limit",
                             details={"bytes": total, "limit": policy.max_total_bytes}))
    if deps:
        risk = risk_level(proposal.get("risk"))
        declared = _declared(proposal.get("declared_constraints"))
        if "no_deps" in declared or "no_dependencies" in declared:
            out.append(Rejection("POLICY_CONSTRAINT_NO_DEPS",
                                 f"declared no_deps but touches dependency files {', '.join(deps)}",
                                 details={"paths": deps}))
        if risk not in policy.dependency_risk_allowed:
            out.append(Rejection("POLICY_DEPENDENCY_FILE",
                                 f"touches dependency/lock file(s) {', '.join(deps)} at risk {risk!r}; "
                                 f"policy {policy.name!r} allows them only at risk "
                                 f"{', '.join(policy.dependency_risk_allowed)}",
                                 details={"paths": deps, "risk": risk,
                                          "allowed_risks": list(policy.dependency_risk_allowed),
                                          "hint": f"give the task \"risk\": \"{policy.dependency_risk_allowed[0]}\""
                                                  " (or leave risk undeclared), or keep the tool off "
                                                  f"{', '.join(deps)}" if policy.dependency_risk_allowed
                                          else "this policy allows no dependency-file change"}))
    declared = _declared(proposal.get("declared_constraints"))
    binary = [fp.path for fp in parsed.files if fp.binary is not None]
    if "no_binary" in declared and binary:
        out.append(Rejection("POLICY_CONSTRAINT_NO_BINARY",
                             f"declared no_binary but has binary changes: {', '.join(binary)}",
                             details={"paths": binary}))
    deleted = [fp.path for fp in parsed.files if fp.is_deleted]
    if "no_delete" in declared and deleted:
        out.append(Rejection("POLICY_CONSTRAINT_NO_DELETE", f"declared no_delete but deletes {', '.join(deleted)}",
                             details={"paths": deleted}))
    atom = proposal.get("atomicity", "atomic_proposal")
    if atom not in policy.allowed_atomicity:
        out.append(Rejection("POLICY_ATOMICITY", f"atomicity {atom!r} not allowed by policy",
                             details={"atomicity": atom}))
    # dedupe identical (code, details) pairs, keep order
    seen: set[tuple[str, str]] = set()
    uniq: list[Rejection] = []
    for r in out:
        key = (r.code, repr(sorted(r.details.items())))
        if key not in seen:
            seen.add(key)
            uniq.append(r)
    return uniq


def check_proposal(proposal: Mapping[str, Any], diff_bytes: bytes | None, *, wave_base: str,
                   facts: BaseFacts, policy: IntegrationPolicy,
                   parsed: ParsedDiff | None = None, inputs: tuple[str, ...] = ()
                   ) -> tuple[list[Rejection], CheckedProposal | None]:
    """All gates, in a fixed order; returns (rejections, checked proposal or None).
    `inputs`: the globs of the required suites' inputs (validation_inputs), judged from the base."""
    rej: list[Rejection] = []
    pid = str(proposal.get("proposal_id", ""))
    base = str(proposal.get("base_ref", ""))
    if not pid:
        rej.append(Rejection("PROPOSAL_INVALID", "proposal has no proposal_id", INTEGRITY))
    if proposal.get("binding_mismatches"):
        rej.append(Rejection("PROPOSAL_BINDING_MISMATCH", "the proposal claims another run, wave, node or attempt "
                             "than the grant that submitted it", INTEGRITY,
                             {"mismatches": list(proposal["binding_mismatches"])}))
    if not is_git_oid(base):
        rej.append(Rejection("PROPOSAL_BASE_NOT_SHA", "base_ref must be a full commit SHA", INTEGRITY,
                             {"base_ref": base}))
    elif base != wave_base:
        rej.append(Rejection("PROPOSAL_WRONG_BASE", "base_ref is not the wave base", INTEGRITY,
                             {"base_ref": base, "wave_base": wave_base}))
    elif not facts.commit_exists:
        rej.append(Rejection("PROPOSAL_BASE_UNKNOWN", "base commit not in the repository", INTEGRITY,
                             {"base_ref": base}))
    elif facts.tree_hash != proposal.get("base_tree_hash"):
        rej.append(Rejection("PROPOSAL_TREE_MISMATCH", "base_tree_hash differs from the base tree",
                             INTEGRITY, {"claimed": proposal.get("base_tree_hash"),
                                         "actual": facts.tree_hash}))
    if diff_bytes is None:
        rej.append(Rejection("PROPOSAL_DIFF_MISSING", "no diff_ref or diff_unified", INTEGRITY))
        return rej, None
    canon_name = str(proposal.get("diff_canonicalization", ""))
    if canon_name not in diffs.SUPPORTED_CANONICALIZATIONS:
        rej.append(Rejection("PROPOSAL_CANONICALIZATION_UNSUPPORTED",
                             f"unknown diff canonicalization {canon_name!r}", INTEGRITY,
                             {"supported": list(diffs.SUPPORTED_CANONICALIZATIONS)}))
        return rej, None
    try:
        parsed = parsed or diffs.parse_diff(diff_bytes)
    except DiffError as exc:
        rej.append(Rejection("PROPOSAL_DIFF_MALFORMED", exc.message, INTEGRITY,
                             {"diff_error": exc.code, **exc.details}))
        return rej, None
    canonical = diffs.serialize_diff(parsed)
    digest = digest_bytes(canonical)
    if digest != proposal.get("diff_digest"):
        rej.append(Rejection("PROPOSAL_DIGEST_MISMATCH", "diff digest does not match diff_digest",
                             INTEGRITY, {"claimed": proposal.get("diff_digest"), "actual": digest}))
    if not parsed.files:
        rej.append(Rejection("PROPOSAL_EMPTY", "the diff changes nothing", REDUNDANT))
    claimed = proposal.get("touched_files")
    if claimed is not None and sorted(claimed) != parsed.touched_files():
        rej.append(Rejection("PROPOSAL_TOUCHED_FILES_MISMATCH", "touched_files disagrees with the diff",
                             INTEGRITY, {"claimed": sorted(claimed), "actual": parsed.touched_files()}))
    for fp in parsed.files:
        if fp.old_path is not None and fp.old_oid and fp.old_path in facts.base_oids:
            have = facts.base_oids[fp.old_path]
            if not have.startswith(fp.old_oid) and set(fp.old_oid) != {"0"}:
                rej.append(Rejection("PROPOSAL_PREIMAGE_MISMATCH",
                                     "diff preimage blob is not the base blob", INTEGRITY,
                                     {"path": fp.old_path, "diff": fp.old_oid, "base": have}))
    rej.extend(check_policy(parsed, proposal, policy, canonical_size=len(canonical),
                            base_symlinks=facts.base_symlinks, base_modes=facts.base_modes))
    if facts.apply_check_ok is False and not any(r.reason == POLICY for r in rej):
        rej.append(Rejection("PROPOSAL_APPLY_CHECK_FAILED", "diff does not apply to the base commit",
                             INTEGRITY, {"error": facts.apply_check_error[:2000]}))
    if rej:
        return rej, None
    fps = tuple(diffs.hunk_fingerprints(parsed, base))
    touched = parsed.touched_files()
    return [], CheckedProposal(proposal=proposal, held=canonical, touched=tuple(touched),
                               fingerprints=fps,
                               protected=tuple(policy.protected_touched(touched)),
                               size=size_rise(policy, len(touched), changed_lines(parsed)),
                               inputs_changed=tuple(changed_inputs(parsed, inputs)) if inputs else ())


def changed_lines(parsed: ParsedDiff) -> int:
    """Added plus removed lines of a parsed diff (what the size rule counts)."""
    return sum(1 for fp in parsed.files for h in fp.hunks for ln in h.lines if ln[:1] in (b"+", b"-"))


# ---------------------------------------------------------------------------
# shell: gather the facts from git


class BaseInspector:
    """Caches what proposals on one base share: commit, tree, blob ids, links.
    Only the CACHED_BASES bases looked up last keep their index: a run with a derived
    base per task (the fullchip block: 146, 25 MB of indexes) would otherwise hold one
    index of the whole tree per task. An index let go is read again from git, the same."""

    CACHED_BASES = 8

    def __init__(self, repo: Path | str, reader: ObjectReader | None = None) -> None:
        from . import gitio
        self._gitio = gitio
        self.repo = repo
        self._reader = reader
        self._cache: OrderedDict[str, tuple[bool, str | None, dict[str, str], frozenset[str]]] = OrderedDict()
        self._modes: dict[str, dict[str, str]] = {}
        self._virtual: dict[str, str] = {}  # derived base -> its tree (no commit to read it from)

    def base(self, base_ref: str) -> tuple[bool, str | None, dict[str, str], frozenset[str]]:
        got = self._cache.get(base_ref)
        if got is not None:
            self._cache.move_to_end(base_ref)
            return got
        g = self._gitio
        if base_ref in self._virtual:
            tree = self._virtual[base_ref]
            got = (True, tree, *self._tree_index(tree, base_ref))
        elif not is_git_oid(base_ref) or g.rev_parse(self.repo, base_ref) != base_ref:
            got = (False, None, {}, frozenset())
        else:
            tree = g.tree_of(self.repo, base_ref)
            got = (True, tree, *self._tree_index(base_ref, base_ref))
        self._cache[base_ref] = got
        while len(self._cache) > self.CACHED_BASES:
            old, _ = self._cache.popitem(last=False)
            self._modes.pop(old, None)
        return got

    def modes(self, base_ref: str) -> dict[str, str]:
        """Mode per path of a base (looked up again if its index was let go)."""
        if base_ref not in self._cache:
            self.base(base_ref)
        return self._modes.get(base_ref, {})

    def register_virtual_base(self, base_ref: str, tree: str) -> None:
        """A base known by its tree only (a derived base the coordinator rebuilt
        itself): blob ids and symlinks come from the tree."""
        self._virtual[base_ref] = tree
        self._cache.pop(base_ref, None)
        self._modes.pop(base_ref, None)
        self.base(base_ref)

    def _tree_index(self, tree_ish: str, key: str) -> tuple[dict[str, str], frozenset[str]]:
        """Blob id per path and the set of symlink paths of a commit or tree
        (the modes are kept under `key`)."""
        oids: dict[str, str] = {}
        modes = self._modes.setdefault(key, {})
        links: set[str] = set()
        out = self._gitio.git(self.repo, "ls-tree", "-r", "-z", "--full-tree", tree_ish).stdout
        for rec in filter(None, out.split(b"\x00")):  # -z ends every record with NUL
            meta, _, path = rec.partition(b"\t")
            mode, _typ, oid = meta.decode().split(" ")
            p = path.decode("utf-8", "surrogateescape")
            oids[p] = oid
            modes[p] = mode
            if mode == "120000":
                links.add(p)
        return oids, frozenset(links)

    def apply_check(self, base_ref: str, parsed: ParsedDiff) -> tuple[bool, str]:
        """Does the diff apply to exactly `base_ref`? In process when every
        file is a plain edit of a base blob, else `git apply --check --cached`
        on a private index read from the base."""
        exists, _tree, oids, _links = self.base(base_ref)
        if not exists:
            return False, "base commit unknown"
        simple = all(not fp.is_rename and not fp.copy and fp.binary is None for fp in parsed.files)
        if simple and self._reader is not None:
            try:
                for fp in parsed.files:
                    if fp.is_new:
                        if fp.new_path in oids:
                            return False, f"{fp.new_path} already exists"
                        diffs.apply_text(fp, b"")
                        continue
                    have = oids.get(fp.path)
                    if have is None:
                        return False, f"{fp.path} does not exist at base"
                    if fp.old_oid and have != fp.old_oid:
                        return False, f"{fp.path}: preimage blob differs"
                    if fp.hunks:
                        _t, data = self._reader.read(have)
                        diffs.apply_text(fp, data)
                return True, ""
            except DiffError as exc:
                return False, exc.message
        import tempfile
        from pathlib import Path
        with tempfile.TemporaryDirectory(prefix="dome-check-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            g = self._gitio
            g.git(self.repo, "read-tree", _tree or base_ref, env=env)
            proc = g.git(self.repo, "apply", "--check", "--cached", "-", env=env,
                         input=diffs.serialize_diff(parsed), check=False)
            return proc.returncode == 0, proc.stderr.decode("utf-8", "replace")


def verify_proposal(proposal: Mapping[str, Any], diff_bytes: bytes | None, *, wave_base: str,
                    policy: IntegrationPolicy, inspector: BaseInspector, inputs: tuple[str, ...] = ()
                    ) -> tuple[list[Rejection], CheckedProposal | None]:
    """Shell around check_proposal: look the base up in git, apply-check, check."""
    base = str(proposal.get("base_ref", ""))
    exists, tree, oids, links = inspector.base(base) if is_git_oid(base) else (False, None, {}, frozenset())
    parsed = None
    ok: bool | None = None
    err = ""
    if diff_bytes is not None:
        try:
            parsed = diffs.parse_diff(diff_bytes)
        except DiffError:
            parsed = None
    if parsed is not None and exists and base == wave_base:
        ok, err = inspector.apply_check(base, parsed)
    facts = BaseFacts(commit_exists=exists, tree_hash=tree, apply_check_ok=ok,
                      apply_check_error=err, base_symlinks=links, base_oids=oids,
                      base_modes=inspector.modes(base) if exists else {})
    return check_proposal(proposal, diff_bytes, wave_base=wave_base, facts=facts, policy=policy,
                          parsed=parsed, inputs=inputs)
