"""The worker launcher: the rlimits, the parent-death signal and the cgroup join that a
preexec_fn used to set are set by the exec'd launcher, so the coordinator spawns with
vfork; a worker started this way is as limited as before."""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from coordinator.executors.base import Limits
from coordinator.executors.sandbox import hard_limits, launcher_argv, launcher_tools

LIMITS = Limits(cpu_seconds=7, max_open_files=99, max_file_mb=3, memory_mb=512, max_processes=50)


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30, env={}).stdout


def test_the_launched_command_has_every_limit_and_no_preexec_is_needed(tmp_path: Path) -> None:
    tools = launcher_tools()
    assert tools is not None, "setpriv, prlimit and sh are part of the supported hosts"
    cg = tmp_path / "cg"  # a directory standing in for a cgroup: the join writes our pid to cgroup.procs
    cg.mkdir()
    probe = ["/bin/sh", "-c", "echo $$; ulimit -t; ulimit -n; ulimit -f; ulimit -c; ulimit -v; ulimit -p"]
    out = _run(launcher_argv(LIMITS, {"pids": cg}, probe, tools, hard_limits(LIMITS, {"pids": cg}))).split()
    pid, cpu, nofile, fsize_blocks, core, vmem, nproc = out
    assert (cg / "cgroup.procs").read_text().strip() == pid  # joined by the very process that runs the command
    assert (cpu, nofile, core) == ("7", "99", "0")
    assert int(fsize_blocks) * 512 == 3 * 1024 * 1024
    assert vmem == str(512 * 1024)  # no memory cgroup: the address-space rlimit stands in
    assert nproc == "unlimited" or int(nproc) != 50  # a pids cgroup bounds processes, not RLIMIT_NPROC
    # no cgroups at all: the process-count rlimit is set instead
    out = _run(launcher_argv(LIMITS, None, ["/bin/sh", "-c", "ulimit -p"], tools, hard_limits(LIMITS, None)))
    assert out.strip() == "50"


def test_a_limit_is_never_asked_above_the_hard_limit() -> None:
    tools = ("setpriv", "prlimit", "sh")
    hard = {resource.RLIMIT_NOFILE: 64, resource.RLIMIT_CPU: resource.RLIM_INFINITY}
    argv = launcher_argv(LIMITS, None, ["w"], tools, hard)
    assert "--nofile=64:64" in argv and "--cpu=7:7" in argv and argv[-2:] == ["--", "w"]
    assert argv[:4] == ["setpriv", "--pdeathsig", "KILL", "--"] and "sh" not in argv


def test_a_cgroup_path_cannot_inject_shell_words(tmp_path: Path) -> None:
    """The join script takes the cgroups as positional arguments: a path with shell syntax is a path."""
    tools = launcher_tools()
    assert tools is not None
    evil = tmp_path / "x; touch pwned; $(touch pwned2)"
    evil.mkdir()
    _run(launcher_argv(LIMITS, {"pids": evil}, ["/bin/true"], tools, hard_limits(LIMITS, {"pids": evil})))
    assert (evil / "cgroup.procs").exists()
    assert not list(Path.cwd().glob("pwned*")) and not list(tmp_path.glob("pwned*"))


def test_the_worker_dies_with_the_process_that_launched_it(tmp_path: Path) -> None:
    tools = launcher_tools()
    assert tools is not None
    pidfile = tmp_path / "pid"
    argv = launcher_argv(LIMITS, None, ["/bin/sh", "-c", f"echo $$ > {pidfile}; exec sleep 60"], tools,
                         hard_limits(LIMITS, None))
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
