"""What a command starts for live telemetry, from its flags and the environment."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from .follow import Follower


def start_run_telemetry(ledger: Any, run_id: str | None = None, *, log_format: str = "text",
                        env: Mapping[str, str] | None = None) -> "Follower | None":
    """A follower of one run with the sinks asked for (OTEL_* spans, JSON event logs), or None
    when nothing is asked: then the run pays nothing for telemetry. Without `run_id` it follows
    the run whose records `ViewTap` hands it (the run loop's view hears every record)."""
    from .follow import Follower
    from .tracing import sink_from_env

    spans = sink_from_env(os.environ if env is None else env)
    log = None
    if log_format == "json":
        from .logs import EventLog
        log = EventLog()
    if spans is None and log is None:
        return None
    return Follower(ledger, run_id, spans=spans, log=log, tapped=run_id is None).start()


class ViewTap:
    """The run loop's live view, with every record it hears also handed to a follower (O(1) on
    the loop's thread); everything else goes to the view as is."""

    def __init__(self, view: Any, follower: "Follower") -> None:
        self._view, self._follower = view, follower

    def on_record(self, rec: Any, loop: Any = None) -> None:
        self._follower.tap(rec)
        self._view.on_record(rec, loop)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view, name)


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
