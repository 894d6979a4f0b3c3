"""The operator's configuration: one table of settings, each from a flag or the environment.

`SETTINGS` is the table docs/operations.md prints. `resolve(values, env)` reads a command's
flags (None where not given) and the environment, checks every value and returns the
settings, or raises `ConfigInvalid` naming the setting before any work starts. An
environment variable with the `DOME_` prefix that no setting and no other part of dome
reads, in a namespace this table owns, is refused too (`ConfigUnknown`): a typo must not silently fall back to a default.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from registry.errors import DomeError


class ConfigInvalid(DomeError):
    code = "CONFIG_INVALID"


class ConfigUnknown(DomeError):
    code = "CONFIG_UNKNOWN"


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError("must be a positive number of seconds")
    return value


def _positive_int(text: str) -> int:
    value = int(str(text), 10)
    if value < 1:
        raise ValueError("must be a whole number >= 1")
    return value


def _choice(*options: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return text
    return parse


def _bind(text: str) -> tuple[str, int]:
    host, sep, port = str(text).rpartition(":")
    if not sep or not host:
        raise ValueError("must be HOST:PORT")
    number = int(port, 10)
    if not 0 <= number <= 65535:
        raise ValueError("port must be 0..65535")
    return host.strip("[]"), number


def _path(text: str) -> Path:
    if not str(text).strip():
        raise ValueError("must be a path")
    return Path(text)


@dataclass(frozen=True)
class Setting:
    name: str
    flag: str
    env: str
    default: Any
    parse: Callable[[str], Any]
    applies: str
    meaning: str


SETTINGS: tuple[Setting, ...] = (
    Setting("call_timeout_s", "--call-timeout", "DOME_MCP_CALL_TIMEOUT_S", 600.0, _positive_float, "dome mcp",
            "seconds a tool call may run in a worker before it is stopped (TIMEOUT fault)"),
    Setting("max_parallel", "--max-parallel", "DOME_MAX_PARALLEL", None, _positive_int, "dome run",
            "attempts in flight at once (default: the work queue's scheduling.max_parallel, else 4)"),
    Setting("artifact_root", "--artifact-root", "DOME_MCP_ARTIFACT_ROOT", None, _path, "dome mcp",
            "where the layout tools write artifacts (default OPS_ROOT/mcp/klayout)"),
    Setting("mcp_bind", "--http", "DOME_MCP_BIND", None, _bind, "dome mcp",
            "HOST:PORT of the streamable HTTP door (default: stdio)"),
    Setting("serve_bind", "--bind", "DOME_SERVE_BIND", "127.0.0.1:8780", _bind, "dome serve",
            "HOST:PORT of the read-only web page and /metrics"),
    Setting("consent_mode", "--consent-mode", "CONSENT_MODE", "strict", _choice("strict", "lenient", "off"),
            "dome mcp", "consent for destructive tools"),
    Setting("log_format", "--log-format", "DOME_LOG_FORMAT", "text", _choice("text", "json"),
            "dome run, mcp, serve", "stderr: human lines, or one JSON object per line"),
)
BY_NAME = {s.name: s for s in SETTINGS}
# the namespaces this table owns: a variable in one of them that no setting names is a typo
# (the other variables already read there are listed); the rest of DOME_* belongs elsewhere
OWNED_PREFIXES = ("DOME_MCP_", "DOME_SERVE_", "DOME_LOG_", "DOME_MAX_")
OTHER_OWNED_ENV = frozenset({
    "DOME_MCP_TOKEN", "DOME_MCP_ALLOW", "DOME_MCP_NO_FASTPATH", "DOME_MCP_TEST_TOOLS", "DOME_MCP_CACHE_DIR",
    "DOME_MCP_CONFORMANCE", "DOME_MCP_DIRECT", "DOME_MCP_INSPECTOR", "DOME_MCP_INSPECTOR_VERSION",
    "DOME_SERVE_TOKEN",
    # the MCP door's path policy and worker sandbox (coordinator/mcp/paths.py, worker_sandbox.py), its
    # HTTP guard (coordinator/mcp/httpguard.py) and its ref policy (coordinator/mcp/refpolicy.py)
    "DOME_MCP_READ_ROOTS", "DOME_MCP_WRITE_ROOTS", "DOME_MCP_DECK_ROOTS", "DOME_MCP_SANDBOX",
    "DOME_MCP_HEADER_TIMEOUT_S", "DOME_MCP_BODY_TIMEOUT_S", "DOME_MCP_AGENT_REFS", "DOME_MCP_RISK_FLOOR",
})


def resolve(flags: Mapping[str, Any], env: Mapping[str, str], names: tuple[str, ...]) -> dict[str, Any]:
    """The settings `names` for one command: the flag when given, else the variable, else
    the default. Pure: the caller hands in its flags and the environment."""
    out: dict[str, Any] = {}
    for name in names:
        s = BY_NAME[name]
        raw, source = flags.get(name), s.flag
        if raw is None and env.get(s.env) not in (None, ""):
            raw, source = env[s.env], s.env
        if raw is None:
            out[name] = s.default
            continue
        try:
            out[name] = s.parse(raw) if isinstance(raw, str) else s.parse(str(raw))
        except (ValueError, TypeError) as exc:
            raise ConfigInvalid(f"{source}={raw!r}: {exc}", details={"setting": name, "source": source,
                                                                     "value": str(raw)},
                                hints=["docs/operations.md lists every setting and its values"]) from None
    named = {x.env for x in SETTINGS} | OTHER_OWNED_ENV
    unknown = sorted(k for k in env if k.startswith(OWNED_PREFIXES) and k not in named)
    if unknown:
        raise ConfigUnknown(f"unknown setting {unknown[0]}", details={"variables": unknown},
                            hints=["docs/operations.md lists every setting; unset the variable or fix its name"])
    return out


def table_markdown() -> str:
    """The configuration table as docs/operations.md shows it (a test keeps the two equal)."""
    rows = ["| setting | flag | environment | default | command | meaning |", "|---|---|---|---|---|---|"]
    for s in SETTINGS:
        default = "-" if s.default is None else str(s.default)
        rows.append(f"| {s.name} | `{s.flag}` | `{s.env}` | {default} | {s.applies} | {s.meaning} |")
    return "\n".join(rows)
