"""Attempt directories on the host: one per run, one below it per attempt.

    <tmp>/dome-run-<run_id>-<random>/      base.git, coordinator.pub, gw.sock
        attempts/<node_execution_id>/      spawn.json, task.json, worker.key, scratch/, logs/

An attempt's directory (its private key included) is removed as soon as the
attempt has ended; the whole run directory when the run loop exits. A
coordinator killed with SIGKILL can do neither, so a resume calls
`sweep_attempt_dirs(run_id, keep=...)` before it dispatches again. Only
directories owned by this user are touched, never a symlink.
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

RUN_DIR_PREFIX = "dome-run-"


def make_run_dir(run_id: str) -> Path:
    """A fresh private (0700) directory for a run's host-side files, findable by run id."""
    return Path(tempfile.mkdtemp(prefix=f"{RUN_DIR_PREFIX}{run_id}-"))


def attempt_roots(run_id: str, tmp: Path | None = None) -> list[Path]:
    """Run directories of `run_id` left in the temp dir (ours, real directories only)."""
    base = Path(tmp or tempfile.gettempdir())
    out = []
    for p in sorted(base.glob(f"{RUN_DIR_PREFIX}{run_id}-*")):
        try:
            st = p.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
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
    """Remove an ended attempt's directory (spawn.json, worker.key, scratch, logs)."""
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
