"""The run loop's contracts with its caller and its finish stage: what it
needs (RunContext), what it hands the finish stage (FinishedRun), what it
returns (RunOutcome), and the finish used without integration."""
from __future__ import annotations

from dataclasses import replace, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from .. import runstate as rs
from ..runstate import RunState
from ..workqueue import WorkQueue
from .partial import PartialDecision
from .writer import LedgerWriter

# the run loop's own records that carry the coordinator's signature
SIGNED_TOPICS = frozenset({rs.SCHEDULING_DECISION, "grant.issued", rs.RUN_STARTED, rs.RUN_RESUMED, rs.RUN_FINISHED})


@dataclass
class RunContext:
    """Everything the loop needs from outside (the CLI builds it)."""

    ledger: Any
    ops_root: Path
    signer: Any
    keyring: Any
    executor_kind: str = "local"
    sandbox: str = "bwrap"
    seed: int | None = None
    max_parallel: int | None = None
    finish: Callable[["FinishedRun"], dict[str, Any]] | None = None
    view: Any = None
    executor: Any = None  # injected executor (tests, benchmarks)
    image: str | None = None  # the worker image of the container executor (NAME or NAME@sha256:...)
    gateway_bind: str | None = None  # HOST[:PORT]: the gateway also over TCP+TLS, for Ray workers on other hosts
    # with scheduling.rebase_waves_on_integration_head: loop -> (sha, tree) of the integration head, or None
    wave_base: Callable[[Any], tuple[str, str] | None] | None = None
    lease_ttl_s: float | None = None  # the run lease's time to live (default ledger.lease.DEFAULT_TTL_S)
    egress: Any = None  # coordinator.egress.config.EgressConfig: agent nodes reach model hosts through the gate
    submitted_by: str | None = None  # the MCP client that submitted the run (run.started, and every record's envelope)
    tool_dirs: tuple[str, ...] = ()  # `dome run --tool-dir`: shown read-only to workers and validations


def make_run_executor(wq: WorkQueue, *, kind: str, sandbox: str, max_parallel: int | None,
                      image: str | None, gateway_bind: str | None, tool_dirs: tuple[str, ...] = ()) -> Any:
    """The executor a run of `wq` uses. Built before anything of the run is written, so a host
    that cannot run its attempts (SANDBOX_UNAVAILABLE, CONTAINER_UNAVAILABLE) leaves nothing."""
    from ..executors import make_executor  # only the kind asked for is imported (Ray is heavy)
    from ..executors.base import Limits

    return make_executor(kind, sandbox=sandbox, max_concurrency=max_parallel or int(wq.scheduling.get("max_parallel", 4)),
                         limits=replace(Limits.from_work_queue(wq.limits), tool_dirs=tuple(dict.fromkeys(tool_dirs))),
                         image=image, gateway_bind=gateway_bind,
                         # what the pre-started worker runtime imports ahead (coordinator.executors.zygote)
                         intents=tuple(sorted({str(t.action_spec.get("intent")) for t in wq.graph.nodes.values()})))


@dataclass
class FinishedRun:
    """What the run loop hands its finish stage: the run, its graph state and accepted proposals."""
    run_id: str
    work_queue: WorkQueue
    repo: Path
    base_ref: str
    base_tree_hash: str
    state: RunState
    node_status: Mapping[str, str]
    proposals: list[dict[str, Any]]
    writer: LedgerWriter
    ops_dir: Path
    ledger: Any
    partial: PartialDecision  # whether the finish integrates, and which tasks did not land
    signer: Any = None
    ops_root: Path | None = None
    sandbox: str = "bwrap"
    seed: int = 0
    view: Any = None  # the live view: integration reports its steps to it
    canvas: Any = None  # the in-run canvas driver (canvas_driver.CanvasDriver) when it integrated during the run
    tool_dirs: tuple[str, ...] = ()  # the queue's and the command line's tool folders


@dataclass
class RunOutcome:
    run_id: str
    status: str
    head: str | None
    promoted_ref: str | None
    ops_path: str
    counts: dict[str, int] = field(default_factory=dict)
    awaiting_consent: bool = False  # held at the human gate: `dome promote RUN --consent TOKEN`
    consent_token_file: str | None = None
    cost: dict[str, Any] | None = None  # the run's CPU (coordinator_cpu_s, workers_cpu_s, ...): run_cost.run_cost

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "status": self.status, "head": self.head,
                "promoted_ref": self.promoted_ref, "ops_path": self.ops_path, "counts": self.counts,
                "awaiting_consent": self.awaiting_consent, "consent_token_file": self.consent_token_file,
                "cost": self.cost}


def default_finish(fc: FinishedRun) -> dict[str, Any]:
    ok = all(s == "succeeded" for s in fc.node_status.values())
    return {"status": "completed" if ok else "failed", "head": fc.base_ref, "promoted_ref": None,
            "reason": None if ok else "some nodes failed or were blocked"}
