"""Jobs of the litho engine: a tool call on a thread, polled by job_id and cancellable
(RFC 0006 §1 G2 path B). `api` re-exports these names."""
from __future__ import annotations

import gc
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from worker_sdk.cancel import CancellationToken, Cancelled

from .violations import SCHEMA_VERSION

# ----- jobs (job_id + poll, RFC 0006 §1 G2 path B) -----------------------------------------------

@dataclass
class Job:
    job_id: str
    tool: str
    status: str = "running"  # running | completed | cancelled | failed
    progress: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    token: CancellationToken = field(default_factory=CancellationToken)
    thread: threading.Thread | None = None
    cancel_requested_at: float | None = None  # time.monotonic()
    stopped_at: float | None = None  # when the engine stopped working (before memory release)

    def poll(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "job_id": self.job_id, "status": self.status,
                               "progress": dict(self.progress)}
        if self.result is not None:
            out["result"] = self.result
        if self.error is not None:
            out["error"] = self.error
        return out

    def cancel(self) -> None:
        self.cancel_requested_at = time.monotonic()
        self.token.cancel("cancel requested")

    def join(self, timeout: float | None = None) -> None:
        if self.thread is not None:
            self.thread.join(timeout)


JOBS: dict[str, Job] = {}


def start_job(tool: str, request: dict[str, Any]) -> Job:
    """Run evaluate/optimize/simulate on a thread; poll() the Job; cancel() stops it at the next check."""
    from . import api

    fn = {"evaluate": api.evaluate, "optimize": api.optimize, "simulate": api.simulate}[tool]
    job = Job(uuid.uuid4().hex, tool)

    def progress(done: int, total: int, loss: float) -> None:
        job.progress = {"iteration": done, "total": total, "loss": loss}

    def body() -> None:
        try:
            if tool == "optimize":
                job.result = fn(request, job.token, progress=progress)
            else:
                job.result = fn(request, job.token)
            job.status = "completed"
        except Cancelled:
            job.stopped_at = time.monotonic()
            job.status = "cancelled"
        except Exception as exc:  # typed errors keep their code
            job.error = exc.to_object() if hasattr(exc, "to_object") else {"code": "LITHO_INTERNAL", "message": str(exc),
                                                                             "details": {}, "hints": [], "retry": "none"}
            job.status = "failed"
        finally:
            release_memory()

    job.thread = threading.Thread(target=body, name=f"litho-{tool}-{job.job_id[:8]}", daemon=True)
    JOBS[job.job_id] = job
    job.thread.start()
    return job


def release_memory() -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # pragma: no cover
        pass
