"""What a run records about itself when it starts: its id, the environment,
the registry it used, per-node seeds and egress terms; and the run loop's errors."""
from __future__ import annotations

import platform
import secrets
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from ledger.clock import utc_now
from registry.canonical import digest_bytes, digest_json
from registry.errors import DomeError


class RunError(DomeError):
    code = "RUN_ERROR"


class BaseRefUnresolved(RunError):
    code = "BASE_REF_UNRESOLVED"


class RunNotFound(RunError):
    code = "RUN_NOT_FOUND"


utc_stamp = utc_now  # RFC 3339 UTC with microseconds (ledger.clock.utc_now)


def new_run_id() -> str:
    return "run-" + datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)


def _git(repo: Path, *args: str) -> str:
    r = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if r.returncode != 0:
        raise BaseRefUnresolved(f"git {' '.join(args)} failed: {r.stderr.strip()[:300]}",
                                details={"repo": str(repo), "args": list(args)})
    return r.stdout.strip()


def registry_ref() -> str:
    """Digest of the registry's schemas and tool contracts this coordinator uses."""
    import registry
    root = Path(registry.__file__).resolve().parent
    h = []
    for sub in ("schemas", "tools", "policy"):
        for p in sorted((root / sub).rglob("*.json")) if (root / sub).exists() else []:
            h.append([str(p.relative_to(root)), digest_bytes(p.read_bytes())])
    return "registry@" + digest_json(h)


def environment(executor: str, sandbox: str) -> dict[str, Any]:
    env = {"python": platform.python_version(), "platform": platform.platform(), "executor": executor,
           "sandbox": sandbox, "git": _safe(["git", "--version"])}
    if sandbox == "bwrap":
        env["bwrap"] = _safe(["bwrap", "--version"])
    try:
        from importlib.metadata import version
        env["dome"] = version("dome")
    except Exception:  # noqa: BLE001
        env["dome"] = "unknown"
    return env


def _safe(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"


def host_container_ref(env: Mapping[str, Any]) -> str:
    return "host@" + digest_json(dict(env))


def node_seed(seed: int, node_id: str) -> int:
    return int(digest_json([seed, node_id])[7:20], 16) % (2 ** 53)


def egress_terms(action_spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """The grant terms of an agent node's runtime card (hosts, models, budgets), or None."""
    if action_spec.get("intent") != "agent":
        return None
    from registry.agent_card import grant_terms

    return grant_terms((action_spec.get("params") or {}).get("card") or action_spec.get("card"))
