"""The Executor interface and SpawnSpec validation.

An executor starts one worker attempt from a validated SpawnSpec and the
files it needs (`AttemptFiles`), reports attempts that exited (`poll`), and
kills an attempt with everything it started (`kill`). Results never come
back through the executor: a worker reports only through the gateway. The
executor's exit information (code, signal, stderr tail, sandbox events) is
what the run loop records when a worker died without reporting.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol

from registry.errors import DomeError, SchemaValidationError
from registry.schema_lite import validate

PINNED = re.compile(r"^(sha256:[0-9a-f]{64}|[^@\s]+@(sha256:[0-9a-f]{64}|[0-9a-f]{40}|[0-9a-f]{64}))$")


class SpawnSpecInvalid(DomeError):
    code = "SPAWN_SPEC_INVALID"


class ScratchDirInvalid(DomeError):
    code = "SCRATCH_DIR_INVALID"  # $DOME_SCRATCH_DIR names no usable directory


class SandboxUnavailable(DomeError):
    code = "SANDBOX_UNAVAILABLE"
    hints_default = ["install bubblewrap (apt-get install bubblewrap) or pass --sandbox none explicitly"]


def validate_spawn_spec(spec: Mapping[str, Any]) -> None:
    """Fail closed: schema (unknown or missing fields) and pinned refs."""
    try:
        validate("spawn_spec", dict(spec))
    except SchemaValidationError as exc:
        raise SpawnSpecInvalid(f"SpawnSpec refused: {exc.message}", details=exc.details) from None
    for k in ("task_spec_ref", "tool_profile_ref", "container_ref"):
        if not PINNED.match(str(spec.get(k, ""))):
            raise SpawnSpecInvalid(f"SpawnSpec {k} is not an immutable ref", details={"field": k})
    if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", str(spec.get("base_ref", ""))):
        raise SpawnSpecInvalid("SpawnSpec base_ref is not a commit SHA", details={"field": "base_ref"})


@dataclass(frozen=True)
class AttemptFiles:
    """Host paths an attempt needs; the sandbox decides where they appear inside. A path
    `/proc/self/fd/N` is an in-memory file held open at descriptor N (`fds`)."""

    spawn_json: Path
    scratch: Path
    base_git: Path
    gateway_socket: Path
    coordinator_pub: Path
    log_dir: Path
    task_json: Path | None = None  # what the worker's runtime needs beyond the SpawnSpec (limits, outputs)
    worker_key: Path | None = None  # the attempt's private key (0600) for a sender-constrained grant
    egress_socket: Path | None = None  # the coordinator's egress gate (agent workers), bound beside the gateway
    log_file: Path | None = None  # the worker's one log (stdout and stderr); None: log_dir / "worker.log"
    # descriptors of in-memory files (spawn spec, task facts, key at /proc/self/fd/N): passed to the
    # worker's process at the same numbers, closed by the executor once it has started
    fds: tuple[int, ...] = ()


@dataclass(frozen=True)
class Limits:
    cpu_seconds: int = 600
    memory_mb: int = 4096
    max_open_files: int = 1024
    max_processes: int = 256
    max_file_mb: int = 1024
    tmp_mb: int = 1024  # the private /tmp tmpfs
    disk_mb: int = 4096  # the scratch tmpfs (checkout + diff): the attempt's disk quota
    tool_dirs: tuple[str, ...] = ()  # host folders shown read-only at their own paths (tool venvs, toolchains)

    @classmethod
    def from_work_queue(cls, limits: Mapping[str, Any]) -> "Limits":
        return cls(**{k: int(v) for k, v in limits.items() if k in cls.__dataclass_fields__})


@dataclass
class ExitInfo:
    node_execution_id: str
    returncode: int | None
    signal: int | None = None
    stderr_tail: str = ""
    violations: list[dict[str, Any]] = field(default_factory=list)
    spawn_error: dict[str, Any] | None = None  # the attempt never started: why (dispatch_error's object)


def dispatch_error(exc: BaseException) -> dict[str, Any]:
    """The error object of a dispatch that failed (recorded with the attempt's task.failed)."""
    if isinstance(exc, DomeError):
        return exc.to_object()
    return {"code": "DISPATCH_FAILED", "message": str(exc)}


class Executor(Protocol):
    name: str
    max_concurrency: int

    def dispatch(self, spec: Mapping[str, Any], files: AttemptFiles) -> None: ...

    def poll(self) -> list[ExitInfo]: ...

    def kill(self, node_execution_id: str, reason: str) -> None: ...

    def running(self) -> list[str]: ...

    def shutdown(self) -> None: ...
