"""Pre-flight: what a work queue needs from its repository and policy,
checked at load, before any worker starts and before anything is written
(no ledger row, no ops directory, no database).

Checked, in order, each failure a WorkQueueError (exit 2) naming the problem:

- the file parses (strict JSON, closed schema, known intents and suites,
  promote_to a branch ref) - `coordinator.workqueue`;
- the repository exists and `base_ref` names a commit in it;
- `promote_to`, when it exists already, is an ancestor of the base, so the
  promotion can fast-forward; when another run moved it past the base the
  queue must say so (`"if_target_moved": "stack"` runs on the target's
  current commit) or be fixed (the error says how);
- the policy exists and grants every task's capabilities (no admin class,
  no capability the resolver does not know, never an empty grant);
- when the run will be integrated, every suite the policy requires for the
  tasks' declared risk classes is defined in `validations`;
- the script a root task runs (`argv[0]` as a relative path, or the script
  an interpreter is given) exists in the base commit;
- the tool folders (`tool_dirs`, `--tool-dir`) are absolute directories that
  hold neither the repository nor OPS_ROOT, and every command task's program
  (`argv[0]` as a bare name or an absolute path) is one the worker sandbox
  will show: a missing one is refused naming the folder to add.

Git is only read (rev-parse, merge-base, cat-file, check-ref-format).
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Mapping

from registry.errors import DomeError

from .executors.attempts import scratch_root
from .workqueue import WorkQueue, WorkQueueError, load_work_queue

INTERPRETERS = frozenset({"python", "python3", "sh", "bash", "zsh", "node", "perl", "ruby", "Rscript"})
SCRIPT_SUFFIXES = (".py", ".sh", ".bash", ".js", ".mjs", ".pl", ".rb", ".R")
GIT_TIMEOUT_S = 60


class PreflightError(WorkQueueError):
    code = "PREFLIGHT_FAILED"


class CapabilityMissing(PreflightError):
    """A task's intent needs a capability the task does not request (it would fail OUT_OF_PROFILE)."""

    code = "CAPABILITY_MISSING"


@dataclass(frozen=True)
class Prepared:
    """A work queue that passed pre-flight, with the base the run will use."""

    queue_path: Path
    wq: WorkQueue
    repo: Path
    base_sha: str
    base_tree: str
    base_source: str  # "base_ref", or "promote_to" when stacking onto a moved target
    target_sha: str | None  # promote_to's commit at load (None: the branch does not exist yet)


def _git(repo: Path, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C",
           "HOME": os.environ.get("HOME", "/nonexistent"), "GIT_OPTIONAL_LOCKS": "0"}
    try:
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env=env,
                              timeout=GIT_TIMEOUT_S, input=input)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PreflightError(f"git could not be run on {repo}: {exc}", code="REPO_UNREADABLE",
                             details={"repo": str(repo)}) from None


def _commit(repo: Path, ref: str) -> str | None:
    r = _git(repo, "rev-parse", "-q", "--verify", "--end-of-options", f"{ref}^{{commit}}")
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None


def repo_path(queue_path: Path, wq: WorkQueue) -> Path:
    """The queue's `repo`, relative to the queue file's directory unless absolute."""
    return Path(wq.repo) if Path(wq.repo).is_absolute() else (queue_path.parent / wq.repo).resolve()


def prepare(queue_path: Path | str, *, integrate: bool = True, tool_dirs: tuple[str, ...] = (),
            sandbox: str = "bwrap", ops_root: Path | None = None) -> Prepared:
    """Load the work queue at `queue_path` and run every pre-flight check.
    `tool_dirs`: the command line's tool folders (beside the queue's)."""
    path = Path(queue_path).resolve()
    wq = load_work_queue(path)
    return check(wq, path, integrate=integrate, tool_dirs=tool_dirs, sandbox=sandbox, ops_root=ops_root)


def check(wq: WorkQueue, queue_path: Path, *, integrate: bool = True, tool_dirs: tuple[str, ...] = (),
          sandbox: str = "bwrap", ops_root: Path | None = None) -> Prepared:
    repo = repo_path(queue_path, wq)
    if not repo.is_dir():
        raise PreflightError(f"repository not found: {repo}", code="REPO_NOT_FOUND",
                             details={"repo": str(repo), "given": wq.repo},
                             hints=["`repo` is a path relative to the work queue file, or absolute"])
    top = _git(repo, "rev-parse", "--git-dir")
    if top.returncode != 0:
        raise PreflightError(f"not a git repository: {repo}", code="REPO_NOT_FOUND",
                             details={"repo": str(repo), "git": top.stderr.strip()[:300]})
    base = _commit(repo, wq.base_ref)
    if base is None:
        raise PreflightError(f"base_ref {wq.base_ref!r} names no commit in {repo}", code="BASE_REF_NOT_FOUND",
                             details={"repo": str(repo), "base_ref": wq.base_ref},
                             hints=["list branches with `git -C REPO branch -a`"])
    to_ref = str(wq.promote_to)
    fmt = _git(repo, "check-ref-format", to_ref)
    if fmt.returncode != 0:  # the pure rule in workqueue mirrors git's; git has the last word
        raise PreflightError(f"promote_to {to_ref!r} is not a valid ref name", code="PROMOTE_TO_INVALID",
                             details={"promote_to": to_ref})
    target = _commit(repo, to_ref)
    base_source = "base_ref"
    if target is not None and target != base:
        behind = _git(repo, "merge-base", "--is-ancestor", target, base).returncode == 0
        if not behind:
            if wq.if_target_moved != "stack":
                branch = to_ref.removeprefix("refs/heads/")
                raise PreflightError(
                    f"promote_to {to_ref} is at {target[:12]}, which is not an ancestor of base_ref "
                    f"{wq.base_ref!r} ({base[:12]}): the promotion could not fast-forward, so the run would "
                    "end blocked", code="TARGET_NOT_ANCESTOR",
                    details={"promote_to": to_ref, "target": target, "base_ref": wq.base_ref, "base": base},
                    hints=[f"build on what was promoted: set \"base_ref\": \"{to_ref}\"",
                           "or set \"if_target_moved\": \"stack\" to run on the target's current commit",
                           "or promote to another branch (change promote_to)",
                           f"or, if that work is not wanted, delete the branch: git -C {repo} branch -D {branch}"])
            base, base_source = target, "promote_to"
    tree = _git(repo, "rev-parse", "--verify", f"{base}^{{tree}}").stdout.strip()
    _check_grants(wq)
    if integrate:
        _check_suites(wq)
    _check_scripts(wq, repo, base)
    dirs = (*wq.tool_dirs, *tool_dirs)
    check_tool_dirs(dirs, repo, ops_root)
    if sandbox == "bwrap":
        check_programs(wq, dirs)
    scratch_root()  # $DOME_SCRATCH_DIR, when set, names a usable directory
    return Prepared(queue_path, wq, repo, base, tree, base_source, target)


def _check_grants(wq: WorkQueue) -> None:
    """Every task's capabilities give a grant under the policy (the same derivation dispatch
    uses), and that grant has what the task's intent will call: checked on EVERY task."""
    from registry.contracts import default_registry
    from registry.grant_scope import derive_scope
    from registry.intents import PATCH_CAPABILITY, PATCH_METHOD, proposes_patch

    from .gateway.auth import CARD, grant_capabilities

    reg = default_registry()
    scopes: dict[tuple[str, ...], Any] = {}
    for nid, node in wq.graph.nodes.items():
        requested = list(node.task.get("required_capabilities", []))
        caps = tuple(grant_capabilities(requested))
        where = {"node_id": node.source_id, "policy": wq.policy}
        if caps not in scopes:
            try:
                scopes[caps] = derive_scope(reg, policy_id=wq.policy, card_ref=CARD, required_capabilities=caps)
            except DomeError as exc:
                raise PreflightError(f"task {node.source_id!r}: {exc.message}", code=exc.code,
                                     details={**exc.details, **where}, hints=exc.hints) from None
        intent = str(node.action_spec.get("intent"))
        if not proposes_patch(node.action_spec, node.task.get("required_outputs", [])) \
                or PATCH_METHOD in scopes[caps].allowed_methods:
            continue
        if not requested:  # nothing asked for: the grant has nothing the task must do
            raise PreflightError(
                f"task {node.source_id!r} requests no capabilities but must propose a patch "
                f"(intent {intent}): nothing to grant it", code="GRANT_SCOPE_EMPTY",
                details={**where, "intent": intent, "capability": PATCH_CAPABILITY},
                hints=[f"add \"{PATCH_CAPABILITY}\" to the task's required_capabilities"])
        raise CapabilityMissing(
            f"task {node.source_id!r}: intent {intent} proposes a patch, which needs capability "
            f"{PATCH_CAPABILITY!r}; the task requests {requested}", details={
                **where, "intent": intent, "capability": PATCH_CAPABILITY, "requested": requested},
            hints=[f"add \"{PATCH_CAPABILITY}\" (or \"write:patch\") to the task's required_capabilities"])


def _check_suites(wq: WorkQueue) -> None:
    from registry.intents import SUITES_WITHOUT_CONFIG

    from .integration.policy import IntegrationPolicy, fitted_to_queue
    from .integration.validation import suite_name
    from .integration.validation_inputs import provided_suites

    risks = sorted({n.risk_level for n in wq.graph.nodes.values()})
    policy = fitted_to_queue(IntegrationPolicy.load(wq.policy, domain=wq.domain), provided_suites(wq.validations),
                             risks)
    defined = {suite_name(v) for v in wq.validations}
    missing = [s for s in policy.required_suites(risks) if s not in defined and s not in SUITES_WITHOUT_CONFIG]
    if missing:
        raise PreflightError(
            f"policy {wq.policy!r} requires suite(s) {', '.join(missing)} for risk {', '.join(risks)}, "
            "and the work queue does not define them: the gate could never pass",
            code="SUITE_NOT_DEFINED", details={"policy": wq.policy, "risks": risks, "missing": missing,
                                               "defined": sorted(defined)},
            hints=[f"add a validation named {s!r} (e.g. {{\"suite\": \"command\", \"name\": \"{s}\", "
                   f"\"argv\": [...]}})" if s == "tests" else f"add a {s!r} validation with its params"
                   for s in missing])


def script_of(action: Mapping[str, Any]) -> str | None:
    """The repository path a command action runs as a script, when it names one."""
    argv = list(action.get("argv") or [])
    if not argv:
        return None
    first = argv[0]
    if "/" in first and not first.startswith("/"):
        cand = first
    elif PurePosixPath(first).name in INTERPRETERS and len(argv) > 1 and not argv[1].startswith("-") \
            and not argv[1].startswith("/") and ("/" in argv[1] or argv[1].endswith(SCRIPT_SUFFIXES)):
        cand = argv[1]
    else:
        return None
    cwd = str((action.get("params") or {}).get("cwd") or action.get("cwd") or "")
    parts = [p for p in PurePosixPath(cwd, cand).parts if p not in (".", "")]
    return "/".join(parts) if parts and ".." not in parts else None


def _check_scripts(wq: WorkQueue, repo: Path, base: str) -> None:
    """Root tasks run on the base commit, so their script must be in it (later tasks
    may run on a base an earlier task changed, and are not checked)."""
    wanted = []
    for node in wq.graph.nodes.values():
        if node.dependencies or node.action_spec.get("intent") != "command":
            continue
        path = script_of(node.action_spec)
        if path and "\n" not in path:
            wanted.append({"node_id": node.source_id, "script": path})
    if not wanted:
        return
    r = _git(repo, "cat-file", "--batch-check=%(objecttype)", input="".join(f"{base}:{w['script']}\n"
                                                                             for w in wanted))
    answers = r.stdout.splitlines()
    missing = [w for w, a in zip(wanted, answers) if a.strip() != "blob"] if r.returncode == 0 \
        else wanted
    if missing:
        first = missing[0]
        raise PreflightError(f"task {first['node_id']!r} runs {first['script']!r}, which is not in the base "
                             f"commit {base[:12]}", code="SCRIPT_NOT_FOUND",
                             details={"missing": missing, "base": base},
                             hints=["commit the script, or fix the path (it is relative to the checkout)"])



# ---------------------------------------------------------------------------
# Tools in the sandbox: what a command task's argv[0] will be inside it.


class ToolDirRefused(PreflightError):
    code = "TOOL_DIR_REFUSED"


class ToolNotVisible(PreflightError):
    code = "TOOL_NOT_VISIBLE"


def _under(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root + "/") or root == "/"


def check_tool_dirs(dirs: Any, repo: Path, ops_root: Path | None) -> None:
    """Each tool folder is an absolute existing directory that neither holds nor lies
    inside the repository or OPS_ROOT (keys, ledger): a worker may read it whole."""
    private = [("the repository", str(repo.resolve()))]
    if ops_root is not None:
        private.append(("OPS_ROOT", str(Path(ops_root).resolve())))
    for d in dirs:
        if not str(d).startswith("/"):
            raise ToolDirRefused(f"tool folder {d!r} is not an absolute path", details={"tool_dir": d})
        real = os.path.realpath(d)
        if not os.path.isdir(real):
            raise ToolDirRefused(f"tool folder {d} is not a directory on this host", details={"tool_dir": d})
        for what, root in private:
            if _under(root, real) or _under(real, root):
                raise ToolDirRefused(f"tool folder {d} would show {what} ({root}) to workers",
                                     details={"tool_dir": d, "refused_because": what, "path": root},
                                     hints=["name the tool's own folder (its virtualenv, node_modules, toolchain)"])


def sandbox_roots(tool_dirs: Any) -> list[str]:
    """The host folders a worker sandbox shows at their own paths (coordinator.executors.sandbox)."""
    from .executors.sandbox import SYSTEM_DIRS, python_roots
    return [*SYSTEM_DIRS, *(str(r) for r in python_roots()), *(os.path.realpath(d) for d in tool_dirs)]


def resolve_in_sandbox(argv0: str, path_var: str, roots: list[str]) -> tuple[str | None, str | None]:
    """(what argv[0] runs inside the sandbox, or None; the host file it would be when
    the sandbox hides it). A bare name is looked up on the sandbox's PATH, an absolute
    path as it is; either must lie, symlinks followed, under a folder the sandbox shows."""
    def shown(p: str) -> bool:
        return any(_under(p, r) for r in roots) and any(_under(os.path.realpath(p), r) for r in roots)

    if argv0.startswith("/"):
        cands = [argv0]
    else:
        cands = [os.path.join(d, argv0) for d in path_var.split(":") if d]
    hidden = None
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            if shown(c):
                return c, None
            hidden = hidden or c
    return None, hidden


def check_programs(wq: WorkQueue, tool_dirs: Any) -> None:
    """A command task's program that exists on this host resolves inside the worker sandbox
    too: a bare name on the sandbox's PATH, an absolute path under a folder it shows. One the
    sandbox would hide is refused naming the folder to add."""
    from .executors.sandbox import sandbox_path
    roots, path_var = sandbox_roots(tool_dirs), sandbox_path()
    for node in wq.graph.nodes.values():
        action = node.action_spec
        if action.get("intent") != "command" or not action.get("argv"):
            continue
        argv0 = str(action["argv"][0])
        if "/" in argv0 and not argv0.startswith("/"):
            continue  # a path in the checkout: _check_scripts
        found, hidden = resolve_in_sandbox(argv0, path_var, roots)
        if found is not None or hidden is None:
            continue  # shown; or found nowhere: the worker's COMMAND_NOT_FOUND says what the sandbox shows
        # the program is on this host, hidden from the sandbox
        real = os.path.realpath(hidden)
        parent = Path(hidden).parent
        folder = str(parent.parent if parent.name == "bin" else parent)
        raise ToolNotVisible(
            f"task {node.source_id!r} runs {argv0}, which exists on this host ({real}) but the worker "
            f"sandbox does not show it: add its folder with \"tool_dirs\": [\"{folder}\"] or "
            f"dome run --tool-dir {folder}",
            details={"node_id": node.source_id, "argv0": argv0, "host_path": real, "tool_dir": folder,
                     "sandbox_path": path_var, "tool_dirs": list(tool_dirs)},
            hints=[f"dome run --tool-dir {folder} ...", f"\"tool_dirs\": [\"{folder}\"] in the work queue"])
