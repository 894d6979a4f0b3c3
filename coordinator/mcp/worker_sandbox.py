"""The MCP worker's sandbox: the run loop's bubblewrap host view, with the path policy's roots.

Inside, the worker sees the read-only system and Python installation and
dome's own packages (coordinator.executors.sandbox.host_view), the read and
deck roots read-only, the litho data folder read-only, and the write roots
(the artifact folders first) as the only writable places; no network, its
own PID namespace, no capabilities, and it dies with the host. So a tool
with a bug cannot write outside the policy either.

`worker_env` is the one place that decides what of the host's environment a
worker gets: never a secret (the HTTP bearer token above all).

$DOME_MCP_SANDBOX=none runs the worker unconfined (an explicit opt-out for a
host without user namespaces); by default a host that cannot sandbox does
not start a worker.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping

from registry.pathpolicy import PathPolicy

SANDBOX_ENV = "DOME_MCP_SANDBOX"
# never handed to a worker: the host's own credentials, and anything named like a secret
SECRET_NAMES = ("DOME_MCP_TOKEN",)
SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "API_KEY", "PRIVATE_KEY", "CREDENTIAL")
REPO_ROOT = Path(__file__).resolve().parents[2]


def is_secret(name: str) -> bool:
    upper = name.upper()
    return name in SECRET_NAMES or any(m in upper for m in SECRET_MARKERS)


def worker_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not is_secret(k)}


def sandboxed(env: Mapping[str, str]) -> bool:
    return env.get(SANDBOX_ENV, "bwrap") != "none"


def _data_roots(env: Mapping[str, str]) -> list[Path]:
    """The litho engine's own data (kernels): the installation's copy and the folders env names."""
    out = [REPO_ROOT / "examples" / "iccad13" / "data"]
    out += [Path(env[k]) for k in ("DOME_ICCAD13_DATA", "DOME_LITHO_KERNELS") if env.get(k)]
    return [Path(os.path.realpath(p)) for p in out if p.exists()]


def _gpu_devices() -> list[str]:
    dev = Path("/dev")
    return sorted(str(p) for p in dev.glob("nvidia*")) + (["/dev/dri"] if (dev / "dri").exists() else [])


def sandbox_argv(policy: PathPolicy, env: Mapping[str, str], argv: list[str], *, bwrap: str) -> list[str]:
    """bwrap's command line around the worker's `argv` (pure but for mkdir of the write roots)."""
    from coordinator.executors.sandbox import CONFINEMENT, host_view

    writable = list(dict.fromkeys(policy.write_roots))
    for w in writable:
        w.mkdir(parents=True, exist_ok=True)
    a, _ = host_view(bwrap)
    readable = dict.fromkeys((*policy.read_roots, *policy.deck_roots, *_data_roots(env)))
    # a read root is bound before the write roots inside it, so those stay writable
    for r in sorted((r for r in readable if r not in writable), key=lambda p: len(p.parts)):
        a += ["--ro-bind-try", str(r), str(r)]
    for w in sorted(writable, key=lambda p: len(p.parts)):
        a += ["--bind", str(w), str(w)]
    for d in _gpu_devices():
        a += ["--dev-bind-try", d, d]
    a += [*CONFINEMENT, "--chdir", str(policy.artifact_root), "--setenv", "HOME", "/tmp", "--", *argv]
    return a


def worker_command(policy: PathPolicy | None, env: Mapping[str, str]) -> list[str]:
    """The worker's argv: inside bubblewrap unless the operator opted out (SandboxUnavailable when it cannot)."""
    argv = [sys.executable, "-m", "worker_sdk.mcp_worker"]
    if policy is None or not sandboxed(env):
        return argv
    from coordinator.executors.sandbox import require_bwrap

    return sandbox_argv(policy, env, argv, bwrap=require_bwrap())
