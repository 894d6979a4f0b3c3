"""Which refs a run submitted through the front door may move without a person.

The operator owns the refs. An agent's run may create a new ref under the
operator's prefix (default `refs/heads/dome/agents/`) on its own; moving a
ref that exists already, or any ref outside the prefix, is held at the human
gate whatever risk the queue declares. A queue's declared risk is raised to
the operator's floor for agent submissions, and a floor the policy gates on
holds the run too. `decide` is pure; `dome run --agent-refs` applies it to the
queue it loaded (run_submit passes the operator's settings), so the queue the
decision saw is the queue that runs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable

DEFAULT_PREFIX = "refs/heads/dome/agents/"
DEFAULT_RISK_FLOOR = "medium"
RISK_LEVELS = ("low", "medium", "high", "critical")
PREFIX_ENV, FLOOR_ENV = "DOME_MCP_AGENT_REFS", "DOME_MCP_RISK_FLOOR"


@dataclass(frozen=True)
class RefPolicy:
    prefix: str = DEFAULT_PREFIX
    risk_floor: str = DEFAULT_RISK_FLOOR

    @classmethod
    def from_env(cls, prefix: str | None = None, risk_floor: str | None = None) -> "RefPolicy":
        p = prefix or os.environ.get(PREFIX_ENV) or DEFAULT_PREFIX
        f = risk_floor or os.environ.get(FLOOR_ENV) or DEFAULT_RISK_FLOOR
        if not p.startswith("refs/") or not p.endswith("/"):
            raise ValueError(f"agent ref prefix must start with refs/ and end with /, not {p!r}")
        if f not in RISK_LEVELS:
            raise ValueError(f"agent risk floor must be one of {', '.join(RISK_LEVELS)}, not {f!r}")
        return cls(p, f)


def effective_risk(declared: Iterable[str | None], floor: str) -> str:
    """The highest of the tasks' declared risks and the floor (an undeclared risk counts as low)."""
    levels = [RISK_LEVELS.index(r) if r in RISK_LEVELS else 0 for r in declared]
    return RISK_LEVELS[max([RISK_LEVELS.index(floor), *levels])]


def reasons_for(prepared: Any, policy: RefPolicy) -> list[str]:
    """The reasons for the queue `dome run` is about to run (coordinator.preflight.Prepared: the
    very queue and the target as pre-flight read them, so nothing can change in between)."""
    from coordinator.integration.policy import IntegrationPolicy

    wq = prepared.wq
    gated = IntegrationPolicy.load(wq.policy).human_gate_risk
    risk = effective_risk((n.task.get("risk") for n in wq.graph.nodes.values()), policy.risk_floor)
    return decide(policy, str(wq.promote_to or ""), prepared.target_sha is not None, risk, gated)


def decide(policy: RefPolicy, promote_to: str, target_exists: bool, risk: str,
           gate_risks: Iterable[str]) -> list[str]:
    """Why this run needs a person before it moves `promote_to` (empty: it may promote on its own)."""
    reasons = []
    if not promote_to.startswith(policy.prefix):
        reasons.append(f"promote_to {promote_to} is outside the agent prefix {policy.prefix}")
    if target_exists:
        reasons.append(f"promote_to {promote_to} exists: moving an existing ref needs a person")
    if risk in set(gate_risks):
        reasons.append(f"risk {risk} (at least the agent floor {policy.risk_floor}) is gated by the policy")
    return reasons
