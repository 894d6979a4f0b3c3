"""Model usage per attempt and per run, folded from `model.call` events (pure)."""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from .metering import CALL_TOPIC


def model_usage(events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """{"attempts": [{node_id, node_execution_id, calls, tokens_in, tokens_out, cost_micros}], "run": {...}}
    from exported event dicts (topic, node_id, node_execution_id, payload)."""
    per: dict[str, dict[str, Any]] = {}
    for ev in events:
        if ev.get("topic") != CALL_TOPIC:
            continue
        p = ev.get("payload") or {}
        neid = str(ev.get("node_execution_id"))
        row = per.setdefault(neid, {"node_id": ev.get("node_id"), "node_execution_id": neid, "calls": 0,
                                    "tokens_in": 0, "tokens_out": 0, "cost_micros": 0})
        row["calls"] += 1
        for k in ("tokens_in", "tokens_out", "cost_micros"):
            row[k] += int(p.get(k, 0))
    rows = sorted(per.values(), key=lambda r: (str(r["node_id"]), r["node_execution_id"]))
    run = {k: sum(r[k] for r in rows) for k in ("calls", "tokens_in", "tokens_out", "cost_micros")}
    return {"attempts": rows, "run": run}
