"""Jobs: every long call gets a job_id that poll and cancel understand.

Job state is kept in memory and written to `<ops_root>/mcp/jobs/<job_id>.json`
at every state change (atomic replace), so a job's terminal state can be read
back after the host has gone (a client disconnect over stdio ends the host).
"""
from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import anyio

from .faults import JobNotFound
from .identity import Client

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})


@dataclass
class Job:
    job_id: str
    tool: str
    status: str = "queued"  # queued | running | succeeded | failed | cancelled
    progress: float = 0.0
    message: str = ""
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    run_id: str | None = None
    generation: int | None = None
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    done: anyio.Event = field(default_factory=anyio.Event, repr=False)
    cancel_hook: Callable[[str], None] | None = field(default=None, repr=False)
    cancel_requested: str | None = None
    idempotency_key: str | None = None
    owner: str | None = None  # the client that started it; other clients are told it does not exist

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"job_id": self.job_id, "tool": self.tool, "status": self.status,
                               "progress": round(self.progress, 6), "message": self.message}
        if self.run_id is not None:
            out["run_id"] = self.run_id
        if self.result is not None:
            out["result"] = self.result
        if self.error is not None:
            out["error"] = self.error
        return out


class JobStore:
    def __init__(self, root: Path | None) -> None:
        self.root = root
        self.jobs: dict[str, Job] = {}

    def new(self, tool: str, owner: str | None = None) -> Job:
        job = Job(job_id="job_" + secrets.token_hex(8), tool=tool, owner=owner)
        self.jobs[job.job_id] = job
        self._persist(job)
        return job

    def get(self, job_id: str, client: Client | None = None) -> Job:
        """The job; JOB_NOT_FOUND when there is none or it is another client's (the same answer)."""
        job = self.jobs.get(job_id) or self._load(job_id)
        if job is None or (client is not None and not client.owns(job.owner)):
            raise JobNotFound(f"no job {job_id}", details={"job_id": job_id},
                              hints=["job ids come from long tools (wait=false) or from run_submit"])
        return job

    def start(self, job: Job, generation: int | None = None) -> None:
        job.status = "running"
        job.generation = generation
        self.touch(job)

    def progress(self, job: Job, fraction: float, message: str | None = None) -> bool:
        """Record progress; False when it would not strictly increase (then it is dropped)."""
        if job.status in TERMINAL or fraction <= job.progress:
            return False
        job.progress = min(fraction, 1.0)
        if message:
            job.message = message
        job.updated = time.time()
        return True

    def finish(self, job: Job, status: str, *, result: dict[str, Any] | None = None,
               error: dict[str, Any] | None = None) -> None:
        if job.status in TERMINAL:
            return
        job.status = status
        if status == "succeeded":
            job.progress = 1.0
        job.result = result
        job.error = error
        self.touch(job)
        job.done.set()

    def request_cancel(self, job: Job, reason: str) -> None:
        job.cancel_requested = reason
        if job.cancel_hook is not None:
            job.cancel_hook(reason)

    def running(self) -> list[Job]:
        return [j for j in self.jobs.values() if j.status not in TERMINAL]

    def touch(self, job: Job) -> None:
        job.updated = time.time()
        self._persist(job)

    def _persist(self, job: Job) -> None:
        if self.root is None:
            return
        data = {**job.to_json(), "created": job.created, "updated": job.updated, "generation": job.generation,
                "owner": job.owner}
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = self.root / f".{job.job_id}.tmp"
            tmp.write_text(json.dumps(data, separators=(",", ":"), default=str))
            os.replace(tmp, self.root / f"{job.job_id}.json")
        except OSError as exc:  # jobs still work in memory; only the read-back after exit is lost
            import sys
            print(f"dome mcp: job files disabled ({self.root}: {exc})", file=sys.stderr)
            self.root = None

    def _load(self, job_id: str) -> Job | None:
        if self.root is None or not job_id.startswith("job_") or "/" in job_id:
            return None
        path = self.root / f"{job_id}.json"
        if not path.is_file():
            return None
        data = json.loads(path.read_text())
        job = Job(job_id=job_id, tool=data.get("tool", "?"), status=data.get("status", "failed"),
                  progress=data.get("progress", 0.0), message=data.get("message", ""),
                  result=data.get("result"), error=data.get("error"), run_id=data.get("run_id"),
                  owner=data.get("owner"))
        if job.status not in TERMINAL:  # a job of a host that is gone
            job.status = "failed"
            job.error = {"code": "JOB_ORPHANED", "message": "the host that ran this job has exited",
                         "retry": "light", "hints": [], "details": {}}
        return job
