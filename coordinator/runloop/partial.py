"""What a run does with the tasks that succeeded when others did not.

A work queue says it with `if_tasks_fail`:

- `promote_nothing` (the default): one failed task ends the run `failed` and
  nothing is integrated. A plan whose parts only make sense together never
  reaches the target half done, and a queue written before this setting
  existed keeps the behaviour it was written for.
- `promote_rest`: the proposals of the tasks that succeeded go through
  integration as usual (stacking, validation, the signed evidence chain,
  the gate). The run records that it is partial and which tasks did not land
  (failed, or blocked because a task they depend on failed); a task that
  depends on a failed one never runs, so nothing built on a missing result
  is integrated.

`decide(node_status, if_tasks_fail)` is a pure function over the scheduler's
node statuses; the run loop's finish stage asks it whether to integrate and
copies `PartialDecision.record()` into `run.finished`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

PROMOTE_NOTHING = "promote_nothing"
PROMOTE_REST = "promote_rest"
IF_TASKS_FAIL = (PROMOTE_NOTHING, PROMOTE_REST)
DEFAULT_IF_TASKS_FAIL = PROMOTE_NOTHING
NOT_LANDED_STATES = ("failed", "blocked")


@dataclass(frozen=True)
class PartialDecision:
    integrate: bool  # hand the succeeded tasks' proposals to the finish stage
    partial: bool  # some tasks did not land, and the rest is integrated anyway
    tasks_not_landed: tuple[tuple[str, str], ...] = ()  # (node_id, failed | blocked), sorted by node id

    def record(self) -> dict[str, Any]:
        """The fields `run.finished` carries for a partial run (none otherwise, so a
        complete run's record is what it was before this setting existed)."""
        if not self.partial:
            return {}
        return {"partial": True, "if_tasks_fail": PROMOTE_REST, "tasks_not_landed": self.not_landed_rows()}

    def not_landed_rows(self) -> list[dict[str, str]]:
        """The tasks a partial run integrates without, as `run.finished` and the gate name them."""
        return [{"node_id": n, "status": s} for n, s in self.tasks_not_landed] if self.partial else []


def decide(node_status: Mapping[str, str], if_tasks_fail: str = DEFAULT_IF_TASKS_FAIL) -> PartialDecision:
    """Whether the finished run integrates, and whether that is a partial integration.

    Every node is expected to be settled (succeeded, failed or blocked)."""
    if if_tasks_fail not in IF_TASKS_FAIL:
        raise ValueError(f"if_tasks_fail must be one of {IF_TASKS_FAIL}, not {if_tasks_fail!r}")
    missing = tuple(sorted((n, s) for n, s in node_status.items() if s != "succeeded"))
    if not missing:
        return PartialDecision(integrate=True, partial=False)
    unsettled = [n for n, s in missing if s not in NOT_LANDED_STATES]
    if unsettled:
        raise ValueError(f"nodes not settled at the finish: {unsettled}")
    succeeded = len(node_status) - len(missing)
    if if_tasks_fail == PROMOTE_NOTHING or succeeded == 0:
        return PartialDecision(integrate=False, partial=False, tasks_not_landed=missing)
    return PartialDecision(integrate=True, partial=True, tasks_not_landed=missing)


def not_landed_from_finish(finished: Mapping[str, Any]) -> list[dict[str, str]]:
    """The tasks a `run.finished` payload says did not land (empty for a complete run)."""
    rows = finished.get("tasks_not_landed") if finished.get("partial") else None
    return [dict(r) for r in rows if isinstance(r, Mapping)] if isinstance(rows, list) else []
