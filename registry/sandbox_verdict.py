"""Did an attempt run into its sandbox's process or memory limit? One rule for both sides.

The worker's runtime judges itself from its cgroups' counters before it reports
(`worker_sdk.sandbox_limits`); the local executor judges the same counters again when it
sweeps the attempt's cgroups (`coordinator.executors.local`), so a worker that lies or dies
is still caught. A reused cgroup's counters hold its earlier attempts' too: only what this
attempt added counts. Pure: counters in, violations out.
"""
from __future__ import annotations

from typing import Any, Mapping


def counter_violations(*, refused_forks: int, oom_kills: int, before: Mapping[str, Any] | None,
                       max_processes: Any, memory_mb: Any) -> list[dict[str, Any]]:
    """The limits the counters show were hit since `before` (the counters when the attempt began)."""
    before = before or {}
    out: list[dict[str, Any]] = []
    forks = int(refused_forks) - int(before.get("refused_forks", 0))
    if forks > 0:
        out.append({"kind": "process_limit", "limit": max_processes, "refused_forks": forks})
    kills = int(oom_kills) - int(before.get("oom_kills", 0))
    if kills > 0:
        out.append({"kind": "memory_limit", "limit_mb": memory_mb, "oom_kills": kills})
    return out
