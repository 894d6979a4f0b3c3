"""Attempt directories on the host: one per run, one below it per attempt.

    <scratch root>/dome-run-<random>/      run_id, base.git, coordinator.pub, gw.sock
        attempts/<node_execution_id>/      spawn.json, task.json, worker.key, worker.log
                                           (scratch/: made by an unsandboxed worker for its checkout)

The scratch root is $DOME_SCRATCH_DIR when set (a tmpfs such as /dev/shm keeps
the checkouts of `--sandbox none` workers off the disk), else the temp dir.
Each attempt costs the coordinator one directory and four files: every file
created is a syscall, an inode and later a deletion. An attempt's directory
(its private key included) is removed as soon as the attempt has ended; the
whole run directory when the run loop exits. A coordinator killed with
SIGKILL can do neither, so a resume calls `sweep_attempt_dirs(run_id,
keep=...)` before it dispatches again. Only directories owned by this user
are touched, never a symlink.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any, Mapping

from registry.signing import SigningKey

from .base import AttemptFiles, Limits, ScratchDirInvalid

RUN_DIR_PREFIX = "dome-run-"
RUN_ID_FILE = "run_id"  # names the run a directory belongs to
SCRATCH_ENV = "DOME_SCRATCH_DIR"  # where run directories go (default: the temp dir)
WORKER_LOG = "worker.log"  # the worker's stdout and stderr, in its attempt's directory


def scratch_root() -> Path:
    """Where run directories are made: $DOME_SCRATCH_DIR (an existing, writable directory), else the temp dir."""
    raw = os.environ.get(SCRATCH_ENV, "").strip()
    if not raw:
        return Path(tempfile.gettempdir())
    root = Path(raw)
    if not root.is_absolute() or not root.is_dir() or not os.access(root, os.W_OK | os.X_OK):
        raise ScratchDirInvalid(f"{SCRATCH_ENV}={raw!r} is not an existing writable directory (absolute path)",
                                details={"path": raw},
                                hints=[f"create it, or unset {SCRATCH_ENV} to use the temp dir"])
    return root


def make_run_dir(run_id: str) -> Path:
    """A fresh private (0700) directory for a run's host-side files, findable by run id.
    Its name stays short (the gateway's unix socket lives in it, and socket paths are
    limited to 108 bytes); the run id is in a file inside."""
    root = Path(tempfile.mkdtemp(prefix=RUN_DIR_PREFIX, dir=scratch_root()))
    (root / RUN_ID_FILE).write_text(run_id)
    return root


def attempt_roots(run_id: str, tmp: Path | None = None) -> list[Path]:
    """Run directories of `run_id` left in the scratch root (ours, real directories only)."""
    base = Path(tmp) if tmp is not None else scratch_root()
    out = []
    for p in sorted(base.glob(f"{RUN_DIR_PREFIX}*")):
        try:
            st = p.lstat()
            owner = (p / RUN_ID_FILE).read_text() if stat.S_ISDIR(st.st_mode) else None
        except OSError:
            continue
        if owner == run_id and st.st_uid == os.getuid():
            out.append(p)
    return out


def _drop_keys(root: Path) -> None:
    # the private keys go first, even if removing the rest fails half-way
    for key in root.glob("**/worker.key"):
        try:
            key.unlink()
        except OSError:
            pass


def remove_attempt_dir(adir: Path) -> None:
    """Remove an ended attempt's directory (spawn.json, worker.key, worker.log, what is left of scratch)."""
    if adir.is_symlink() or not adir.exists():
        return
    _drop_keys(adir)
    shutil.rmtree(adir, ignore_errors=True)


def sweep_attempt_dirs(run_id: str, *, keep: Path | None = None, tmp: Path | None = None) -> list[Path]:
    """Remove every run directory of `run_id` except `keep` (the live one); returns what was removed."""
    removed = []
    for root in attempt_roots(run_id, tmp):
        if keep is not None and root.resolve() == Path(keep).resolve():
            continue
        _drop_keys(root)
        shutil.rmtree(root, ignore_errors=True)
        removed.append(root)
    return removed


def write_worker_key(path: Path, key: SigningKey) -> Path:
    """The attempt's private key as a 0600 file (`<kid> <base64 seed>`), created
    exclusively; it is bound read-only into that attempt's sandbox only and is
    never logged, never in the ledger or the SpawnSpec."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{key.kid} {base64.b64encode(key.seed).decode('ascii')}\n")
    return path


def write_attempt(work: Path, spec: Mapping[str, Any], worker_key: SigningKey, task: Mapping[str, Any],
                  limits: Limits, *, egress_socket: Path | None = None) -> AttemptFiles:
    """The attempt dir of one dispatch: its spawn spec, key and task facts (one directory, three files;
    the worker's log is the fourth). The scratch checkout's directory is the worker's to make: a
    sandboxed worker's is a tmpfs of its own, and an unsandboxed one makes `scratch/` as it checks out."""
    adir = work / "attempts" / str(spec["node_execution_id"])
    try:
        adir.mkdir()
    except FileNotFoundError:  # the run's first attempt
        adir.parent.mkdir(exist_ok=True)
        adir.mkdir()
    (adir / "spawn.json").write_text(json.dumps(spec))
    key_path = write_worker_key(adir / "worker.key", worker_key)
    (adir / "task.json").write_text(json.dumps({
        "max_processes": limits.max_processes, "landlock": True,
        "required_outputs": list(task.get("required_outputs", [])),
        "task": {k: task[k] for k in ("intent_tags", "declared_constraints", "risk") if k in task}}))
    return AttemptFiles(spawn_json=adir / "spawn.json", scratch=adir / "scratch", base_git=work / "base.git",
                        gateway_socket=work / "gw.sock", coordinator_pub=work / "coordinator.pub",
                        log_dir=adir, task_json=adir / "task.json", worker_key=key_path,
                        egress_socket=egress_socket)


def log_tail(log_dir: Path, size: int) -> str:
    """The last `size` bytes of an attempt's log (what a failed attempt reports), or ''."""
    try:
        with open(log_dir / WORKER_LOG, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - size))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""
