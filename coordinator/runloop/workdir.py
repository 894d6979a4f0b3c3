"""A coordinator's temp dir for one run, and the attempt dirs in it.

    <tmp>/dome-run-XXXXXXXX/          named short: the gateway socket lives here
        run_id                        which run it belongs to (for resume's clean-up)
        base.git  coordinator.pub  gw.sock
        attempts/<node_execution_id>/ spawn.json  task.json  worker.key  scratch/  logs/

Nothing in it outlives the coordinator that made it: the run loop removes it
when it ends, and a resume removes the dirs a killed coordinator of the same
run left behind (worker keys included).
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping

from registry.signing import SigningKey

from ..executors.base import AttemptFiles, Limits

WORK_PREFIX, WORK_OWNER = "dome-run-", "run_id"


def new_work_dir(run_id: str) -> Path:
    work = Path(tempfile.mkdtemp(prefix=WORK_PREFIX))
    (work / WORK_OWNER).write_text(run_id)
    return work


def remove_stale_work_dirs(run_id: str, keep: Path) -> None:
    """The temp dirs of earlier coordinators of `run_id` (their lease lapsed: nobody uses them)."""
    for old in Path(tempfile.gettempdir()).glob(WORK_PREFIX + "*"):
        try:
            owner = (old / WORK_OWNER).read_text()
        except OSError:
            continue
        if owner == run_id and old != keep:
            shutil.rmtree(old, ignore_errors=True)


def write_worker_key(path: Path, key: SigningKey) -> Path:
    """The attempt's private key as a 0600 file (`<kid> <base64 seed>`), created
    exclusively; it is bound read-only into that attempt's sandbox only and is
    never logged, never in the ledger or the SpawnSpec."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{key.kid} {base64.b64encode(key.seed).decode('ascii')}\n")
    return path


def write_attempt(work: Path, spec: Mapping[str, Any], worker_key: SigningKey, task: Mapping[str, Any],
                  limits: Limits) -> AttemptFiles:
    """The attempt dir of one dispatch: its spawn spec, key, task facts, scratch checkout."""
    adir = work / "attempts" / str(spec["node_execution_id"])
    (adir / "scratch").mkdir(parents=True)
    (adir / "spawn.json").write_text(json.dumps(spec))
    key_path = write_worker_key(adir / "worker.key", worker_key)
    (adir / "task.json").write_text(json.dumps({
        "max_processes": limits.max_processes, "landlock": True,
        "required_outputs": list(task.get("required_outputs", [])),
        "task": {k: task[k] for k in ("intent_tags", "declared_constraints", "risk") if k in task}}))
    return AttemptFiles(spawn_json=adir / "spawn.json", scratch=adir / "scratch", base_git=work / "base.git",
                        gateway_socket=work / "gw.sock", coordinator_pub=work / "coordinator.pub",
                        log_dir=adir / "logs", task_json=adir / "task.json", worker_key=key_path)
