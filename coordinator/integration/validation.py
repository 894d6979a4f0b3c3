"""Validation suites on the integration head, in read-only workers.

- `command` suites: a plain read-only checkout of the head commit, run
  under bubblewrap (read-only root, the checkout bound read-only, private
  /tmp, no network, new PID namespace, dies with the coordinator).
- domain suites (`litho.resim`, `drc`): dispatched across a process
  boundary to `python -m worker_sdk.suite_runner`, which calls the handler
  named in the intents registry and prints its IntentResult as JSON.

Every run yields a ValidationReport bound to the checkpoint and head it ran
on, the proposals included in that head, the suite, the environment digest,
the result and the digests of its artifacts (logs).
"""
from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from registry.canonical import digest_bytes, digest_json

from .canvas import Checkpoint, checkout_readonly
from .validation_inputs import suite_name  # re-exported: its home is the pure module

DOMAIN_SUITES = {"litho.resim": "worker_sdk.litho.intents:resimulate",
                 "litho.topology": "worker_sdk.litho.intents:topology",
                 "drc": "worker_sdk.klayout_tools.intents:drc_suite"}


SUITE_META_KEYS = ("name", "required", "timeout_s", "seed", "inputs")
"""Work-queue keys that describe the suite to dome, not the handler's action."""


def _tool_version(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout.strip()[:200]
    except (OSError, subprocess.SubprocessError):
        return "unavailable"


_ENV_CACHE: dict[str, Any] = {}


READ_ONLY_TOOL_ENV = {"PYTEST_ADDOPTS": "-p no:cacheprovider"}
"""Set for command suites (a suite's own `env` wins): pytest would otherwise
warn that it cannot write .pytest_cache into the read-only checkout."""


def environment() -> dict[str, Any]:
    if not _ENV_CACHE:
        _ENV_CACHE.update({
            "python": sys.version.split()[0], "platform": platform.platform(),
            "git": _tool_version(["git", "--version"]),
            "bwrap": _tool_version(["bwrap", "--version"]),
            "container_image": os.environ.get("DOME_CONTAINER_IMAGE", "host"),
        })
    return dict(_ENV_CACHE)


IN_HEAD = "/dome/head"


def bwrap_argv(checkout: Path, argv: list[str], *, env: Mapping[str, str] | None = None,
               with_dome: bool = False, tool_dirs: tuple[str, ...] = ()) -> list[str]:
    """A read-only validation worker: the same minimal host view as the worker
    sandbox (system dirs, a few /etc files, the Python installation; never
    OPS_ROOT, keys, ledger, the real repository or home directories), the
    checkout read-only at /dome/head, a private /tmp, no network, own PID/IPC/
    UTS namespaces, no capabilities, a new session, dies with the coordinator."""
    from coordinator.executors.sandbox import CONFINEMENT, host_view, sandbox_path
    a, src = host_view(with_dome=with_dome, extra_ro=[Path(d) for d in tool_dirs])
    a += ["--ro-bind", str(checkout), IN_HEAD, *CONFINEMENT, "--chdir", IN_HEAD, "--clearenv",
          "--setenv", "PATH", sandbox_path(), "--setenv", "HOME", "/tmp",
          "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8",
          "--setenv", "PYTHONDONTWRITEBYTECODE", "1"]
    if src:
        a += ["--setenv", "PYTHONPATH", str(src[0].parent)]
    for k, v in sorted((env or {}).items()):
        a += ["--setenv", k, v]
    return a + ["--", *argv]


class SuiteRunner:
    """Runs suites for the Stacker (a `Validator`)."""

    def __init__(self, repo: Path | str, *, sandbox: str = "bwrap",
                 put_artifact: Callable[[bytes], str] | None = None,
                 python: str = sys.executable, timeout_s: float = 600,
                 tool_dirs: tuple[str, ...] = ()) -> None:
        self.repo = Path(repo)
        self.tool_dirs = tuple(tool_dirs)
        self.sandbox = sandbox
        if sandbox == "bwrap" and shutil.which("bwrap") is None:
            from registry.errors import DomeError
            raise DomeError("bubblewrap is not available for read-only validation workers",
                            code="SANDBOX_UNAVAILABLE",
                            hints=["install bubblewrap, or pass sandbox='none' explicitly"])
        self.put_artifact = put_artifact or digest_bytes
        self.python = python
        self.timeout_s = timeout_s
        self._cache: dict[tuple[str, str], dict[str, Any]] = {}

    def __call__(self, cp: Checkpoint, suite: Mapping[str, Any]) -> dict[str, Any]:
        key = (cp.tree, digest_json(dict(suite)))
        if key in self._cache:  # same tree, same suite: same answer (recorded as a new report)
            return {**self._cache[key], "reused_from_tree": cp.tree}
        started = time.monotonic()
        if suite["suite"] == "command":
            result, summary, logs = self._command(cp, suite)
        elif suite["suite"] in DOMAIN_SUITES:
            result, summary, logs = self._domain(cp, suite)
        else:
            result, summary, logs = "error", {"error": f"unknown suite {suite['suite']!r}"}, b""
        env = {**environment(), "sandbox": self.sandbox, "suite": dict(suite)}
        report = {
            "artifact_kind": "dome.validation_report/v1",
            "suite": suite_name(suite), "suite_kind": suite["suite"],
            "suite_digest": digest_json(dict(suite)),
            "tree": cp.tree, "result": result, "summary": summary,
            "environment": {**env, "environment_digest": digest_json(env),
                            "container_digests": [env.get("container_image") if "@sha256:" in str(
                                env.get("container_image")) else "host@" + digest_json(env)]},
            "environment_digest": digest_json(env),
            "artifact_digests": [self.put_artifact(logs)] if logs else [],
            "duration_s": round(time.monotonic() - started, 3),
        }
        self._cache[key] = report
        return report

    def _command(self, cp: Checkpoint, suite: Mapping[str, Any]) -> tuple[str, dict, bytes]:
        with tempfile.TemporaryDirectory(prefix="dome-suite-") as tmp:
            ro = checkout_readonly(self.repo, cp.commit, Path(tmp) / "head")
            argv = list(suite["argv"])
            # the checkout is read-only: tools that cache into it would only warn
            suite_env = {**READ_ONLY_TOOL_ENV,
                         **{str(k): str(v) for k, v in dict(suite.get("env") or {}).items()}}
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8",
                   "PYTHONDONTWRITEBYTECODE": "1", **suite_env}
            cmd = bwrap_argv(ro, argv, env=suite_env, tool_dirs=self.tool_dirs) if self.sandbox == "bwrap" else argv
            try:
                proc = subprocess.run(cmd, cwd=ro, env=env, capture_output=True,
                                      timeout=float(suite.get("timeout_s") or self.timeout_s))
            except subprocess.TimeoutExpired as exc:
                return "failed", {"timeout": True}, (exc.stdout or b"") + (exc.stderr or b"")
            finally:
                for root, dirs, files in os.walk(ro):
                    for d in dirs:
                        os.chmod(os.path.join(root, d), 0o755)
                    os.chmod(root, 0o755)
            logs = proc.stdout + b"\n--- stderr ---\n" + proc.stderr
            failing = failing_tests(logs.decode("utf-8", "replace")) if proc.returncode != 0 else []
            return ("passed" if proc.returncode == 0 else "failed",
                    {"returncode": proc.returncode, "tail": logs[-2000:].decode("utf-8", "replace"),
                     **({"failing_tests": failing} if failing else {})},
                    logs)

    def _domain(self, cp: Checkpoint, suite: Mapping[str, Any]) -> tuple[str, dict, bytes]:
        with tempfile.TemporaryDirectory(prefix="dome-suite-") as tmp:
            ro = checkout_readonly(self.repo, cp.commit, Path(tmp) / "head")
            action = {k: v for k, v in suite.items() if k not in SUITE_META_KEYS}
            sandboxed = self.sandbox == "bwrap"
            request = {"handler": DOMAIN_SUITES[suite["suite"]],
                       "scratch": IN_HEAD if sandboxed else str(ro),
                       "action": action, "seed": int(suite.get("seed", 0))}
            argv = [self.python, "-s", "-m", "worker_sdk.suite_runner"]
            cmd = bwrap_argv(ro, argv, with_dome=True) if sandboxed else argv
            try:
                proc = subprocess.run(cmd, cwd=ro,
                                      input=json.dumps(request).encode(), capture_output=True,
                                      timeout=float(suite.get("timeout_s") or self.timeout_s),
                                      env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
            except subprocess.TimeoutExpired:
                return "failed", {"timeout": True}, b""
            finally:
                for root, dirs, files in os.walk(ro):
                    os.chmod(root, 0o755)
            logs = proc.stdout + b"\n--- stderr ---\n" + proc.stderr
            if proc.returncode != 0:
                return "error", {"returncode": proc.returncode,
                                 "tail": proc.stderr[-2000:].decode("utf-8", "replace")}, logs
            try:
                out = json.loads(proc.stdout.decode().strip().splitlines()[-1])
            except (ValueError, IndexError):
                return "error", {"error": "suite runner printed no result"}, logs
            passed = bool(out.get("summary", {}).get("passed"))
            return ("passed" if passed else "failed"), out, logs


MAX_FAILING_TESTS = 20
FIRST_LINES = 4
_SUMMARY = re.compile(r"^(?:FAILED|ERROR) (\S+)(?: - (.*))?$")
_SECTION = re.compile(r"^_{3,} (.+?) _{3,}$")


def failing_tests(output: str) -> list[dict[str, Any]]:
    """The failing tests a test runner's output names, each with the first lines of
    its failure (pytest: the `FAILED id - message` lines of the short summary, and the
    `E ` lines of the test's section; unittest: `FAIL: name` / `ERROR: name`). Pure."""
    lines = output.splitlines()
    sections: dict[str, list[str]] = {}
    current = None
    for ln in lines:
        m = _SECTION.match(ln)
        if m:
            current = m.group(1).strip()
            sections[current] = []
        elif current is not None and ln.startswith("E ") and ln[1:].strip() and len(sections[current]) < FIRST_LINES:
            sections[current].append(ln[1:].strip())
    out: list[dict[str, Any]] = []
    for ln in lines:
        m = _SUMMARY.match(ln.strip())
        name = m.group(1) if m else None
        msg = (m.group(2) or "") if m else ""
        if name is None:
            u = re.match(r"^(?:FAIL|ERROR): (\S+)", ln)
            name = u.group(1) if u else None
        if name is None or any(t["name"] == name for t in out):
            continue
        short = name.split("::")[-1]
        first = sections.get(short) or sections.get(name.split("::", 1)[-1].replace("::", ".")) or \
            ([msg] if msg else [])
        out.append({"name": name, "first_lines": first[:FIRST_LINES]})
        if len(out) >= MAX_FAILING_TESTS:
            break
    return out
