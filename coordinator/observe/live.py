"""What a command starts for live telemetry, from its flags and the environment."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from .follow import Follower


def start_run_telemetry(ledger: Any, run_id: str, *, log_format: str = "text",
                        env: Mapping[str, str] | None = None) -> "Follower | None":
    """A follower of one run with the sinks asked for (OTEL_* spans, JSON event logs), or None
    when nothing is asked: then the run pays nothing for telemetry."""
    from .follow import Follower
    from .tracing import sink_from_env

    spans = sink_from_env(os.environ if env is None else env)
    log = None
    if log_format == "json":
        from .logs import EventLog
        log = EventLog()
    if spans is None and log is None:
        return None
    return Follower(ledger, run_id, spans=spans, log=log).start()


# the settings each command reads (coordinator.observe.config.SETTINGS)
COMMAND_SETTINGS = {
    "run": ("max_parallel", "log_format"),
    "mcp": ("call_timeout_s", "artifact_root", "mcp_bind", "consent_mode", "log_format"),
    "serve": ("serve_bind", "log_format"),
}
FLAG_ATTRS = {"max_parallel": "max_parallel", "log_format": "log_format", "call_timeout_s": "call_timeout",
              "artifact_root": "artifact_root", "mcp_bind": "http", "consent_mode": "consent_mode",
              "serve_bind": "bind"}


def configured(command: str, args: Any, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A command's settings from its flags and the environment; ConfigInvalid / ConfigUnknown /
    TelemetryConfigInvalid before any work when one is wrong."""
    from .config import resolve
    from .tracing import tracing_wanted

    env = os.environ if env is None else env
    names = COMMAND_SETTINGS[command]
    flags = {n: getattr(args, FLAG_ATTRS[n], None) for n in names}
    out = resolve(flags, env, names)
    tracing_wanted(env)  # a bad OTEL_* value is refused here too
    return out
