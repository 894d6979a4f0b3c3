"""Typed results of `dome verify`: one CheckResult per thing checked.

A check is `ok` only when the thing it names was there and right; when data
it needs is absent the check is `missing` (never `ok`), when the data
disagrees it is `failed`. An `ok` check carries no detail (a detail is what
is wrong), so nothing marked ok can say that data is missing.

The report's `status` (a RunVerdict) says what the intact record shows: the
run was promoted, blocked (the gate named missing links, or the target could
not take the head), awaits consent, failed, or completed without anything
to promote. It is `invalid` when any check is not ok. A blocked run is a
valid outcome: its missing links are the reasons it is blocked (`blocked_by`),
and a check confirms that they are exactly what the recorded gate named.
Callers match on `CheckKind` and `RunVerdict`, never on message text.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    OK = "ok"
    FAILED = "failed"    # the data is there and disagrees
    MISSING = "missing"  # the data the check needs is not there


class RunVerdict(str, Enum):
    """What `dome verify` concludes about a run (its exit code: 0 unless invalid)."""
    PROMOTED = "promoted"
    BLOCKED = "blocked"
    AWAITING_CONSENT = "awaiting_consent"
    FAILED = "failed"
    COMPLETED = "completed"
    INVALID = "invalid"


class CheckKind(str, Enum):
    # the ledger and the run's lifecycle
    LEDGER_CHAIN = "ledger_hash_chain"
    RUN_EXISTS = "run_exists"
    RUN_FINISHED = "run_finished"
    SIGNED_AFTER_FINISH = "signed_after_finish"
    FINISH_AGREES = "run_finished_agrees"
    FINISH_LISTS = "run_finished_lists"  # the proposal lists run.finished keeps in the blob store
    LIST_CHAIN = "list_chain"  # the chunk chains that hold an integration record's long lists
    PARTIAL = "partial_run"  # a run promoted without some tasks says so, and names exactly those
    # the promotion decision and its evidence
    PROMOTION_DECISION = "promotion_decision"
    PROMOTION_SIGNATURE = "promotion_signature"
    PROMOTION_OUTCOME = "promotion_outcome"
    BLOCK_AGREES = "block_agrees_with_gate"  # a blocked decision names exactly the gate's missing links
    REPOSITORY = "repository"
    RECORD_SIGNATURES = "record_signatures"
    EVIDENCE_REF = "evidence_ref"
    EVIDENCE_CHAIN = "evidence_chain"
    PROMOTED_HEAD = "promoted_head"
    POLICY_VERSION = "policy_version"
    TARGET_REF = "target_ref"
    # git objects and the replay of every layer
    GIT_OBJECTS = "git_objects"
    BASE_TREE = "base_tree_hash"
    DIFF = "diff"
    DIFF_DIGEST = "diff_digest"
    REAPPLY = "reapply"
    TREE = "tree"
    REPLAY = "replay"
    VALIDATION_INPUTS = "validation_inputs"  # a report judged with the base's inputs judged the tree they make
    # what dome hands to others (files under ops/runs/<run_id>/)
    EXPORT_EVENTS = "export_events"
    EXPORT_WORK_QUEUE = "export_work_queue"
    EXPORT_TASKS = "export_tasks"
    EXPORT_GATE = "export_gate"
    EXPORT_PROMOTION = "export_promotion"
    EXPORT_INTOTO = "export_intoto"
    # every blob a record or an in-toto subject names, read back and re-hashed
    BLOBS = "attested_blobs"


@dataclass(frozen=True)
class CheckResult:
    kind: CheckKind
    status: Status
    detail: str = ""
    subject: str | None = None  # what it is about: a proposal id, a file, a record

    def __post_init__(self) -> None:
        if self.status is Status.OK and self.detail:
            raise ValueError(f"an ok check carries no detail ({self.kind.value}: {self.detail!r})")

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def name(self) -> str:
        return self.kind.value + (f":{self.subject}" if self.subject else "")

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.name, "kind": self.kind.value, "subject": self.subject,
                "status": self.status.value, "ok": self.ok, "detail": self.detail}


def ok(kind: CheckKind, subject: str | None = None) -> CheckResult:
    return CheckResult(kind, Status.OK, "", subject)


def failed(kind: CheckKind, detail: str, subject: str | None = None) -> CheckResult:
    return CheckResult(kind, Status.FAILED, detail, subject)


def missing(kind: CheckKind, detail: str, subject: str | None = None) -> CheckResult:
    return CheckResult(kind, Status.MISSING, detail, subject)


@dataclass
class VerifyReport:
    run_id: str
    checks: list[CheckResult] = field(default_factory=list)
    head_ref: str | None = None
    to_ref: str | None = None
    outcome: str | None = None      # the promotion decision's outcome (or awaiting_consent), when there is one
    run_status: str | None = None   # what `run.finished` says, when there is one
    run_reason: str | None = None   # and the reason it gives
    blocked_by: list[str] = field(default_factory=list)  # a blocked run's missing links, as recorded
    tasks_not_landed: list[dict[str, Any]] = field(default_factory=list)  # a partial run's, as recorded

    @property
    def status(self) -> RunVerdict:
        return run_verdict(self)

    @property
    def valid(self) -> bool:
        return self.status is not RunVerdict.INVALID

    @property
    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.ok]

    def failed_kinds(self) -> set[CheckKind]:
        return {c.kind for c in self.failures}

    def add(self, result: CheckResult) -> bool:
        self.checks.append(result)
        return result.ok

    def check(self, kind: CheckKind, good: bool, detail: str = "", subject: str | None = None) -> bool:
        """A yes/no check: `detail` says what is wrong and is kept only when it is."""
        return self.add(ok(kind, subject) if good else failed(kind, detail, subject))

    def reasons(self) -> list[str]:
        """The failures as text, for people (programs match on `failures`)."""
        return [f"{c.name}: {c.status.value}" + (f" ({c.detail})" if c.detail else "") for c in self.failures]

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "valid": self.valid, "status": self.status.value,
                "outcome": self.outcome, "blocked_by": self.blocked_by,
                "run_status": self.run_status, "run_reason": self.run_reason,
                "head_ref": self.head_ref, "to_ref": self.to_ref,
                "partial": bool(self.tasks_not_landed), "tasks_not_landed": self.tasks_not_landed,
                "checks": [c.to_dict() for c in self.checks],
                "failures": [c.to_dict() for c in self.failures], "reasons": self.reasons()}


def run_verdict(rep: VerifyReport) -> RunVerdict:
    """The verdict of a report (pure): invalid when a check is not ok, else what the
    promotion decision, or without one what `run.finished`, says happened."""
    if not rep.checks or rep.failures:
        return RunVerdict.INVALID
    if rep.outcome == "promoted":
        # a decision to promote whose ref could not be moved ends the run failed
        return RunVerdict.FAILED if rep.run_status == "failed" else RunVerdict.PROMOTED
    if rep.outcome == "blocked":
        return RunVerdict.BLOCKED
    if rep.outcome == "awaiting_consent":
        return RunVerdict.AWAITING_CONSENT
    if rep.outcome is None and rep.run_status in ("failed", "cancelled"):
        return RunVerdict.FAILED
    if rep.outcome is None and rep.run_status == "completed":
        return RunVerdict.COMPLETED
    return RunVerdict.INVALID
