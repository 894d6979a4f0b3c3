"""Prometheus metrics (prometheus-client) from the projection's observations.

`Metrics` owns one CollectorRegistry. `observe(observations)` folds
`ledger.otel.Observation`s into it (the ledger side: attempts, gateway calls,
integration steps, proposals, gates, consent, refusals, egress); `tool_call` records
an MCP tool call at the front door. `exposition()` is the text a scrape gets.
"""
from __future__ import annotations

import threading
from typing import Any, Iterable

from ledger.otel import SCHEMA_CODES, Observation

PREFIX = "dome_"
# seconds: from a fast gateway call (a few ms) to a long validation suite
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

# name (without prefix and _total) -> (kind, help, label names)
METRICS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "gateway_call_seconds": ("histogram", "worker gateway call latency (grant check to recorded charge)", ("method",)),
    "attempt_duration_seconds": ("histogram", "attempt duration, dispatch to terminal event", ()),
    "integration_step_seconds": ("histogram", "integration step duration", ("step",)),
    "mcp_tool_seconds": ("histogram", "MCP front door tool call latency", ("tool",)),
    "attempts": ("counter", "attempts ended, by outcome", ("outcome",)),
    "proposals": ("counter", "proposals by fate (submitted, applied, dropped, rejected, ...)", ("fate",)),
    "gate_decisions": ("counter", "gate decisions (pass, blocked)", ("decision",)),
    "consent_requests": ("counter", "human consent requests", ()),
    "consent_denials": ("counter", "calls refused for want of a valid consent token", ()),
    "schema_failures": ("counter", "requests refused by their schema", ("where",)),
    "egress_tokens": ("counter", "model tokens through the egress gate", ("direction",)),
    "egress_cost_micros": ("counter", "model cost through the egress gate, micro-dollars", ()),
    "grant_refusals": ("counter", "gateway and egress refusals, by error code", ("code",)),
    "mcp_tool_calls": ("counter", "MCP tool calls, by tool and result", ("tool", "ok")),
    "telemetry_export_failures": ("counter", "span exports that failed (the run went on)", ()),
}


class Metrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        self.lock = threading.Lock()
        self.m: dict[str, Any] = {}
        for name, (kind, text, labels) in METRICS.items():
            if kind == "histogram":
                self.m[name] = Histogram(PREFIX + name, text, labels, registry=self.registry, buckets=BUCKETS)
            else:
                self.m[name] = Counter(PREFIX + name, text, labels, registry=self.registry)

    def _metric(self, name: str, labels: tuple[tuple[str, str], ...]) -> Any:
        metric = self.m[name.removesuffix("_total")]
        return metric.labels(**dict(labels)) if labels else metric

    def observe(self, observations: Iterable[Observation]) -> None:
        for o in observations:
            metric = self._metric(o.metric, o.labels)
            if o.metric.endswith("_seconds"):
                metric.observe(max(0.0, o.value))
            elif o.value:
                metric.inc(o.value)

    def tool_call(self, tool: str, *, ok: bool, ms: float, code: str | None = None) -> None:
        self.m["mcp_tool_seconds"].labels(tool=tool).observe(max(0.0, ms / 1000.0))
        self.m["mcp_tool_calls"].labels(tool=tool, ok="true" if ok else "false").inc()
        if code and code.startswith("CONSENT"):
            self.m["consent_denials"].inc()
        if code in SCHEMA_CODES:
            self.m["schema_failures"].labels(where="mcp").inc()

    def exposition(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
