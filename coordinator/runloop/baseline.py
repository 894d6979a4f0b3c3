"""When the canvas drives the waves (pure): in-run integration batches and
the wave baseline.

`CanvasPolicy` reads the work queue's `scheduling` keys. `CanvasFacts` is a
fold of the run's ledger records (the same records whether the run loop
applies them one by one or a replay folds a stored ledger), and
`advance_to(facts, policy)` says whether the next wave starts from the
integration head: a replay of the ledger reaches the same answer.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

T_BATCH = "integration.batch"
T_CHECKPOINT = "integration.checkpoint"
T_APPLY = "integration.apply_result"
T_EJECT = "integration.ejected"
T_VALIDATION = "integration.validation_report"
WAVE_STARTED = "wave.started"
TASK_ACK = "task.ack"
RUN_STARTED = "run.started"


@dataclass(frozen=True)
class CanvasPolicy:
    """The queue's choice: integrate while the run goes on, and when to
    start new waves from the integration head."""

    during_run: bool = False
    batch_size: int = 4  # integrate when this many accepted proposals wait (or nothing runs)
    advance_after_layers: int | None = None  # K applied layers since the wave base moved
    advance_on_validation: bool = False  # a passing validation of the head
    resolver_max_tries: int = 0  # resolver workers per conflict (0: none, the proposal is dropped)

    @classmethod
    def from_scheduling(cls, sched: Mapping[str, Any]) -> "CanvasPolicy":
        adv = sched.get("advance_baseline") or {}
        return cls(during_run=bool(sched.get("integrate_during_run", False)),
                   batch_size=int(sched.get("integration_batch_size", cls.batch_size)),
                   advance_after_layers=(int(adv["after_layers"]) if adv.get("after_layers") else None),
                   advance_on_validation=bool(adv.get("on_passing_validation", False)),
                   resolver_max_tries=int(sched.get("resolver_max_tries", 0)))

    @property
    def advances(self) -> bool:
        return self.advance_after_layers is not None or self.advance_on_validation


def batch_due(waiting: int, running: int, batch_size: int) -> bool:
    """Integrate now? When enough accepted proposals wait, or some wait and no worker runs."""
    return waiting > 0 and (waiting >= batch_size or running == 0)


@dataclass(frozen=True)
class CanvasFacts:
    """What the ledger says about the canvas so far."""

    run_base: tuple[str, str] | None = None
    head: tuple[str, str] | None = None  # the integration head (commit, tree)
    trees: Mapping[str, str] = field(default_factory=dict)  # checkpoint commit -> tree
    wave_base: str | None = None  # the base of the newest wave
    layers_since_advance: int = 0
    validated_head: str | None = None  # the head a final validation passed on
    accepted: frozenset[str] = frozenset()  # proposal ids acked as winners
    batched: frozenset[str] = frozenset()  # proposal ids handed to integration


def fold_canvas(facts: CanvasFacts, topic: str, payload: Mapping[str, Any]) -> CanvasFacts:
    """One record applied (pure; unknown topics change nothing)."""
    p = payload
    if topic == RUN_STARTED and p.get("base_ref"):
        base = (str(p["base_ref"]), str(p.get("base_tree_hash", "")))
        return replace(facts, run_base=base, head=base, wave_base=base[0],
                       trees={**facts.trees, base[0]: base[1]})
    if topic == TASK_ACK and p.get("accepted") and p.get("proposal_id"):
        return replace(facts, accepted=facts.accepted | {str(p["proposal_id"])})
    if topic == T_BATCH:
        return replace(facts, batched=facts.batched | {str(x) for x in p.get("proposal_ids", [])})
    if topic == T_CHECKPOINT and p.get("commit"):
        return replace(facts, head=(str(p["commit"]), str(p.get("tree", ""))),
                       trees={**facts.trees, str(p["commit"]): str(p.get("tree", ""))})
    if topic == T_EJECT and p.get("rolled_back_to"):
        c = str(p["rolled_back_to"])
        return replace(facts, head=(c, facts.trees.get(c, "")))
    if topic == T_APPLY and p.get("applied") is True:
        return replace(facts, layers_since_advance=facts.layers_since_advance + 1)
    if topic == T_VALIDATION and p.get("phase") == "final":
        ok = p.get("passed") is True and facts.head is not None and p.get("head_ref") == facts.head[0]
        return replace(facts, validated_head=facts.head[0] if ok else None)
    if topic == WAVE_STARTED and p.get("base_ref"):
        moved = str(p["base_ref"]) != facts.wave_base
        return replace(facts, wave_base=str(p["base_ref"]),
                       layers_since_advance=0 if moved else facts.layers_since_advance)
    return facts


def fold_events(events: Any, facts: CanvasFacts | None = None) -> CanvasFacts:
    out = facts or CanvasFacts()
    for e in events:
        topic = getattr(e, "topic", None) or e["topic"]
        payload = getattr(e, "payload", None) if not isinstance(e, Mapping) else e["payload"]
        out = fold_canvas(out, topic, payload or {})
    return out


def advance_to(facts: CanvasFacts, policy: CanvasPolicy) -> tuple[str, str] | None:
    """The (commit, tree) the next wave starts from, or None (it keeps the current base).

    Only when every accepted proposal has been handed to integration (a
    dependent task on the head then finds its ancestors' work there), the
    head moved past the current wave base, and the policy's condition holds."""
    if not policy.advances or facts.head is None or facts.head[0] == facts.wave_base:
        return None
    if facts.accepted - facts.batched:
        return None
    if policy.advance_after_layers is not None and facts.layers_since_advance >= policy.advance_after_layers:
        return facts.head
    if policy.advance_on_validation and facts.validated_head == facts.head[0]:
        return facts.head
    return None
