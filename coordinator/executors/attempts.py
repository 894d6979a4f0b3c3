"""Attempt files on the host: one directory per run, one log or directory below it per attempt.

    <scratch root>/dome-run-<random>/      run_id, base.git, coordinator.pub, gw.sock, attempts/
        attempts/<node_execution_id>.log   the worker's stdout and stderr (local executor)
        attempts/<node_execution_id>/      spawn.json, task.json, worker.key, worker.stdout/.stderr
                                           (executors that bind or ship files: Ray, containers);
                                           scratch/ (made by an unsandboxed worker for its checkout)

The scratch root is $DOME_SCRATCH_DIR when set (a tmpfs such as /dev/shm keeps
the checkouts of `--sandbox none` workers off the disk), else the temp dir.
Every file created is a syscall, an inode and later a deletion, so the local
executor creates one per attempt: the spawn spec, task facts and key are
in-memory files (memfd) passed to the worker's process, and the key never
touches the disk. An attempt's files (its private key included) are removed
as soon as the attempt has ended; the whole run directory when the run loop
exits. A coordinator killed with SIGKILL can do neither, so a resume calls
`sweep_attempt_dirs(run_id, keep=...)` before it dispatches again. Only
directories owned by this user are touched, never a symlink.
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
    (root / "attempts").mkdir()
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
    """Remove an ended attempt's files: its directory (spawn.json, worker.key, worker.log, what is
    left of an unsandboxed checkout) and its log beside it (`<id>.log`)."""
    try:
        adir.with_name(adir.name + ".log").unlink()
    except OSError:
        pass
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


def _key_line(key: SigningKey) -> bytes:
    return f"{key.kid} {base64.b64encode(key.seed).decode('ascii')}\n".encode("ascii")


def write_worker_key(path: Path, key: SigningKey) -> Path:
    """The attempt's private key as a 0600 file (`<kid> <base64 seed>`), created
    exclusively; it is bound read-only into that attempt's sandbox only and is
    never logged, never in the ledger or the SpawnSpec."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(_key_line(key))
    return path


def _memfd(name: str, data: bytes, mode: int) -> int:
    """An anonymous in-memory file holding `data`, read from its start; close-on-exec, so only
    a process it is explicitly passed to gets it."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def fd_path(fd: int) -> Path:
    """The path of an inherited descriptor, as the process it is passed to (at the same number) opens it."""
    return Path(f"/proc/self/fd/{fd}")


def fd_of(path: Path | None) -> int | None:
    """The descriptor an in-memory attempt file is (see `fd_path`), or None for a file on disk."""
    head, _, num = str(path or "").rpartition("/")
    return int(num) if head == "/proc/self/fd" and num.isdigit() else None


def close_fds(files: AttemptFiles) -> None:
    """Close an attempt's in-memory files in this process (once its worker has them, or never will)."""
    for fd in files.fds:
        try:
            os.close(fd)
        except OSError:
            pass


def write_attempt(work: Path, spec: Mapping[str, Any], worker_key: SigningKey, task: Mapping[str, Any],
                  limits: Limits, *, egress_socket: Path | None = None, in_memory: bool = False) -> AttemptFiles:
    """The files of one dispatch: its spawn spec, key and task facts.

    On disk (executors that bind or ship files): the attempt's directory with three files, the
    key 0600 and created exclusively; the worker's log goes beside them. `in_memory` (the local
    executor): three anonymous in-memory files (`memfd`, the key 0600) that the executor passes to
    the worker's process and closes, so nothing but the log (`attempts/<id>.log`) is created on
    disk and the key never touches it. The scratch checkout's directory is the worker's to make:
    a sandboxed worker's is a tmpfs of its own, an unsandboxed one makes `scratch/` as it checks out."""
    neid = str(spec["node_execution_id"])
    adir = work / "attempts" / neid
    facts = json.dumps({
        "max_processes": limits.max_processes, "landlock": True,
        "required_outputs": list(task.get("required_outputs", [])),
        "task": {k: task[k] for k in ("intent_tags", "declared_constraints", "risk") if k in task}})
    common = dict(scratch=adir / "scratch", base_git=work / "base.git", gateway_socket=work / "gw.sock",
                  coordinator_pub=work / "coordinator.pub", egress_socket=egress_socket)
    if in_memory and hasattr(os, "memfd_create"):
        fds: list[int] = []
        try:
            for name, data, mode in (("spawn.json", json.dumps(spec).encode(), 0o644),
                                     ("task.json", facts.encode(), 0o644), ("worker.key", _key_line(worker_key), 0o600)):
                fds.append(_memfd(f"dome-{name}", data, mode))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        spawn, facts_fd, key = fds
        return AttemptFiles(spawn_json=fd_path(spawn), task_json=fd_path(facts_fd), worker_key=fd_path(key),
                            log_dir=adir.parent, log_file=adir.parent / f"{neid}.log", fds=tuple(fds), **common)
    try:
        adir.mkdir()
    except FileNotFoundError:  # the run's first attempt
        adir.parent.mkdir(exist_ok=True)
        adir.mkdir()
    (adir / "spawn.json").write_text(json.dumps(spec))
    key_path = write_worker_key(adir / "worker.key", worker_key)
    (adir / "task.json").write_text(facts)
    return AttemptFiles(spawn_json=adir / "spawn.json", log_dir=adir, task_json=adir / "task.json",
                        worker_key=key_path, **common)


def log_file(files: AttemptFiles) -> Path:
    """The worker's one log (stdout and stderr together)."""
    return files.log_file or files.log_dir / WORKER_LOG


def log_tail(path: Path, size: int) -> str:
    """The last `size` bytes of an attempt's log (what a failed attempt reports), or ''."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - size))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""
