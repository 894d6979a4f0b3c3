"""The worker launcher: the rlimits, the parent-death signal and the cgroup join that a
preexec_fn used to set are set by the exec'd launcher, so the coordinator spawns with
vfork; a worker started this way is as limited as before. Every form is checked: the
util-linux one (setpriv, prlimit, sh), the one whose dash sets the rlimits itself (setpriv, sh)
and the Python one for hosts without them."""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from coordinator.executors.base import Limits
import pytest

from coordinator.executors.sandbox import hard_limits, launcher_argv, launcher_tools, python_launcher_argv

LIMITS = Limits(cpu_seconds=7, max_open_files=99, max_file_mb=3, memory_mb=512, max_processes=50)


def _launch(kind: str, limits: Limits, cgroups, argv: list[str]) -> list[str]:
    if kind == "python":
        return python_launcher_argv(limits, cgroups, argv)
    tools = launcher_tools()
    assert tools is not None, "setpriv, prlimit and sh are part of the supported hosts"
    return launcher_argv(limits, cgroups, argv, tools, hard_limits(limits, cgroups), shell_ulimit=kind == "dash")


KINDS = pytest.mark.parametrize("kind", ["util-linux", "dash", "python"])


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30, env={}).stdout


@KINDS
def test_the_launched_command_has_every_limit_and_no_preexec_is_needed(tmp_path: Path, kind: str) -> None:
    cg = tmp_path / "cg"  # a directory standing in for a cgroup: the join writes our pid to cgroup.procs
    cg.mkdir()
    probe = ["/bin/sh", "-c", "echo $$; ulimit -t; ulimit -n; ulimit -f; ulimit -c; ulimit -v; ulimit -p"]
    out = _run(_launch(kind, LIMITS, {"pids": cg}, probe)).split()
    pid, cpu, nofile, fsize_blocks, core, vmem, nproc = out
    assert (cg / "cgroup.procs").read_text().strip() == pid  # joined by the very process that runs the command
    assert (cpu, nofile, core) == ("7", "99", "0")
    assert int(fsize_blocks) * 512 == 3 * 1024 * 1024
    assert vmem == str(512 * 1024)  # no memory cgroup: the address-space rlimit stands in
    assert nproc == "unlimited" or int(nproc) != 50  # a pids cgroup bounds processes, not RLIMIT_NPROC
    # no cgroups at all: the process-count rlimit is set instead
    out = _run(_launch(kind, LIMITS, None, ["/bin/sh", "-c", "ulimit -p"]))
    assert out.strip() == "50"


def test_a_limit_is_never_asked_above_the_hard_limit() -> None:
    tools = ("setpriv", "prlimit", "sh")
    hard = {resource.RLIMIT_NOFILE: 64, resource.RLIMIT_CPU: resource.RLIM_INFINITY}
    argv = launcher_argv(LIMITS, None, ["w"], tools, hard)
    assert "--nofile=64:64" in argv and "--cpu=7:7" in argv and argv[-2:] == ["--", "w"]
    assert argv[:4] == ["setpriv", "--pdeathsig", "KILL", "--"] and "sh" not in argv
    argv = launcher_argv(LIMITS, None, ["w"], tools, hard, shell_ulimit=True)
    assert "ulimit -n 64 " in argv[6] and "ulimit -t 7 " in argv[6] and argv[4:6] == ["sh", "-c"]


def test_the_dash_launcher_is_the_default_where_sh_is_dash_and_starts_one_program_fewer() -> None:
    """Where /bin/sh is dash the launcher is setpriv then sh (its ulimit sets the rlimits): no prlimit."""
    from coordinator.executors.sandbox import launch_argv, sh_is_dash
    tools = launcher_tools()
    assert tools is not None and sh_is_dash(tools[2]), "the supported hosts' sh is dash"
    argv = launch_argv(LIMITS, None, ["/bin/true"])
    assert tools[1] not in argv and argv[4:6] == [tools[2], "-c"]


def test_a_limit_the_shell_cannot_set_stops_the_launch(tmp_path: Path) -> None:
    """A refused ulimit (here above the hard limit) starts nothing, as prlimit's refusal does."""
    tools = launcher_tools()
    assert tools is not None
    marker = tmp_path / "ran"
    hard = {resource.RLIMIT_NOFILE: 1 << 30}  # above any real hard limit: dash's ulimit refuses it
    argv = launcher_argv(Limits(max_open_files=1 << 30), None, ["/bin/sh", "-c", f"touch {marker}"], tools, hard,
                         shell_ulimit=True)
    assert subprocess.run(argv, capture_output=True, timeout=30).returncode == 125
    assert not marker.exists()


@KINDS
def test_a_cgroup_path_cannot_inject_shell_words(tmp_path: Path, kind: str) -> None:
    """The join script takes the cgroups as positional arguments: a path with shell syntax is a path."""
    evil = tmp_path / "x; touch pwned; $(touch pwned2)"
    evil.mkdir()
    _run(_launch(kind, LIMITS, {"pids": evil}, ["/bin/true"]))
    assert (evil / "cgroup.procs").exists()
    assert not list(Path.cwd().glob("pwned*")) and not list(tmp_path.glob("pwned*"))


@KINDS
def test_the_worker_dies_with_the_process_that_launched_it(tmp_path: Path, kind: str) -> None:
    pidfile = tmp_path / "pid"
    argv = _launch(kind, LIMITS, None, ["/bin/sh", "-c", f"echo $$ > {pidfile}; exec sleep 60"])
    parent = subprocess.Popen([sys.executable, "-c", f"import subprocess,time; subprocess.Popen({argv!r}); "
                               "time.sleep(60)"])
    try:
        deadline = time.monotonic() + 20
        while not (pidfile.exists() and pidfile.read_text().strip()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        child = int(pidfile.read_text())
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while _alive(child):
            assert time.monotonic() < deadline, "the worker outlived the process that launched it"
            time.sleep(0.05)
    finally:
        parent.kill()


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_no_executor_starts_a_worker_with_a_preexec_fn() -> None:
    """A preexec_fn makes CPython fork the whole coordinator (or Ray worker, or the worker runtime)
    instead of vforking, and runs Python between fork and exec: every executor starts workers through
    the launcher, and the worker's command intent applies Landlock on a thread of its own that then
    starts the command (worker_sdk.intents.command.landlocked_popen)."""
    root = Path(__file__).resolve().parents[2]
    offenders = [str(p.relative_to(root)) for pkg in ("coordinator", "ledger", "registry", "worker_sdk")
                 for p in (root / pkg).rglob("*.py") if "preexec_fn=" in p.read_text()]
    assert offenders == []
