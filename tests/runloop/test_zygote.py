"""Sandboxed workers forked from a pre-initialised runtime (worker_sdk/zygote.py): each attempt
still gets a fresh bubblewrap sandbox and reads its own spawn spec and grant; the worker the
zygote forks into it holds no capability, sees only the sandbox's environment and processes,
and is counted and limited in the attempt's cgroups."""
from __future__ import annotations

import pytest

from coordinator.executors.base import AttemptFiles
from coordinator.executors.sandbox import bwrap_argv
from coordinator.executors.zygote import worker_start, zygote_argv
from tests.conftest import git
from coordinator.runloop.finish import integration_finish
from tests.runloop.conftest import cmd_task, run_queue, write_queue


def _files(tmp_path) -> AttemptFiles:
    for name in ("base.git", "scratch", "logs"):
        (tmp_path / name).mkdir()
    for name in ("spawn.json", "coordinator.pub", "gw.sock"):
        (tmp_path / name).write_text("")
    return AttemptFiles(spawn_json=tmp_path / "spawn.json", coordinator_pub=tmp_path / "coordinator.pub",
                        gateway_socket=tmp_path / "gw.sock", base_git=tmp_path / "base.git",
                        scratch=tmp_path / "scratch", log_dir=tmp_path / "logs")


def test_the_zygote_form_keeps_every_sandbox_option_and_runs_the_stub(tmp_path) -> None:
    argv = bwrap_argv(_files(tmp_path), cpus=2)
    zargv, request = zygote_argv(argv, 7, 8, 9)
    cut = argv.index("--")
    assert zargv[:cut] == argv[:cut]  # the same mounts, namespaces, limits and environment
    assert zargv[cut:cut + 4] == ["--as-pid-1", "--info-fd", "7", "--"]
    assert zargv[cut + 4:cut + 6] == ["/bin/sh", "-c"] and "/proc/self/fd/8" in zargv[-1] \
        and "/proc/self/fd/9" in zargv[-1]
    assert request["argv"] == ["/dome/spawn.json"] and request["cwd"] == "/dome/scratch"
    assert request["env"]["DOME_SCRATCH"] == "/dome/scratch" and request["env"]["DOME_WORKER_CPUS"] == "2"
    with pytest.raises(ValueError):
        zygote_argv(["bwrap", "--", "sh", "-c", "true"], 7, 8, 9)


def test_the_start_mode_is_zygote_unless_fresh_is_asked(monkeypatch) -> None:
    monkeypatch.delenv("DOME_WORKER_START", raising=False)
    assert worker_start() == "zygote" and worker_start("fresh") == "fresh"
    monkeypatch.setenv("DOME_WORKER_START", "fresh")
    assert worker_start() == "fresh"
    with pytest.raises(ValueError):
        worker_start("warm")


# what the worker process (the command's parent) is: its capabilities, environment and groups
PROBE = ("grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/$PPID/status > status.txt; "
         "tr '\\0' '\\n' < /proc/$PPID/environ | sort > environ.txt; cat /proc/$PPID/cgroup > cgroup.txt; "
         "ls /proc | grep -c '^[0-9]' > procs.txt")


def test_a_zygote_worker_holds_nothing_the_sandbox_does_not_give(git_repo, ops_root, ledger_env, tmp_path,
                                                                 monkeypatch) -> None:
    monkeypatch.setenv("DOME_ZYGOTE_TEST_SENTINEL", "coordinator-only")
    monkeypatch.delenv("DOME_WORKER_START", raising=False)
    q = write_queue(tmp_path, git_repo, [cmd_task("probe", PROBE, max_attempts=1)])
    loop, out = run_queue(q, ops_root, ledger_env, sandbox="bwrap", finish=integration_finish)
    assert out.status == "promoted", out
    assert loop.executor.worker_start == "zygote"
    assert loop.executor._zygote.proc.poll() is not None  # the zygote ends with its run

    def shown(name: str) -> str:
        return git(git_repo, "show", f"refs/heads/dome/out:{name}")

    status = dict(line.split(":\t") for line in shown("status.txt").splitlines())
    assert {k: v for k, v in status.items() if k.startswith("Cap")} == {
        k: "0000000000000000" for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
    assert status["NoNewPrivs"] == "1"
    env = dict(line.split("=", 1) for line in shown("environ.txt").splitlines() if "=" in line)
    # the environment the process started with (the zygote's own, four variables): nothing of the
    # coordinator's; the worker's variables are set on top of it from the sandbox's (--setenv)
    assert "DOME_ZYGOTE_TEST_SENTINEL" not in env
    assert set(env) <= {"PATH", "PYTHONPATH", "LANG", "PYTHONDONTWRITEBYTECODE"}
    # at the root of the sandbox's cgroup namespace, which is the attempt's groups (a process
    # outside them would show a path climbing out of that root)
    groups = {line.split(":")[1]: line.split(":")[2] for line in shown("cgroup.txt").splitlines()}
    assert groups["pids"] == groups["memory"] == groups["cpuacct"] == "/"
    assert int(shown("procs.txt")) <= 6  # the sandbox's own PID namespace: the stub, the worker, this probe


# -- without a sandbox ---------------------------------------------------------------------------

def test_an_unsandboxed_request_moves_the_in_memory_files_to_3_4_5() -> None:
    from coordinator.executors.zygote import direct_request
    stub, req = direct_request(["/usr/bin/python3", "-m", "worker_sdk", "/proc/self/fd/41"],
                               {"DOME_TASK_META": "/proc/self/fd/42", "DOME_WORKER_KEY": "/proc/self/fd/43",
                                "DOME_SCRATCH": "/x/scratch"}, "/x", [41, 42, 43], 8, 9)
    assert req["sandbox"] is False and req["argv"] == ["/proc/self/fd/3"] and req["cwd"] == "/x"
    assert req["env"] == {"DOME_TASK_META": "/proc/self/fd/4", "DOME_WORKER_KEY": "/proc/self/fd/5",
                          "DOME_SCRATCH": "/x/scratch"}
    assert stub[:2] == ["/bin/sh", "-c"] and "/proc/self/fd/8" in stub[2] and "/proc/self/fd/9" in stub[2]
    with pytest.raises(ValueError):
        direct_request(["sh", "-c", "true"], {}, "/", [], 8, 9)


# burns some CPU in the command, then writes what the worker process (its parent) runs as
BURN = "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; tr '\\0' ' ' < /proc/$PPID/cmdline > cmdline.txt"


def test_unsandboxed_workers_start_from_the_zygote_and_their_cpu_is_counted(git_repo, ops_root, ledger_env,
                                                                             tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("DOME_WORKER_START", raising=False)
    q = write_queue(tmp_path, git_repo, [cmd_task("t0", BURN, max_attempts=1)])
    loop, out = run_queue(q, ops_root, ledger_env, sandbox="none", finish=integration_finish)
    assert out.status == "promoted", out
    assert loop.executor.worker_start == "zygote"
    # a fork of the zygote, not a fresh `python -m worker_sdk SPEC`
    assert "worker_sdk.zygote" in git(git_repo, "show", "refs/heads/dome/out:cmdline.txt")
    cost = out.cost
    # the worker's CPU came back from the zygote: the shell loop alone is well over the stub's
    assert cost["workers_measured_by"] == "process" and cost["workers_cpu_s"] >= 0.1, cost


def _stopped_zygote_forks() -> set[int]:
    """Stopped processes forked from a zygote (they show its command line): the hanging test's worker."""
    import os
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{name}/stat") as f:
                state = f.read().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if b"worker_sdk.zygote" in cmd and state == "T":
            found.add(int(name))
    return found


def test_killing_an_unsandboxed_attempt_kills_its_zygote_worker(git_repo, ops_root, ledger_env, tmp_path,
                                                                monkeypatch) -> None:
    import os
    import time
    monkeypatch.delenv("DOME_WORKER_START", raising=False)
    before = _stopped_zygote_forks()
    # the worker stops itself: only the executor's kill (at the attempt's timeout) can end it
    q = write_queue(tmp_path, git_repo, [cmd_task("hang", "kill -STOP $PPID", max_attempts=1, timeout_s=2)])
    loop, out = run_queue(q, ops_root, ledger_env, sandbox="none", finish=integration_finish)
    assert out.status != "promoted" and loop.executor.worker_start == "zygote"
    deadline = time.monotonic() + 10
    while (left := _stopped_zygote_forks() - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        os.kill(pid, 9)
    assert not left, "a stopped worker outlived its attempt"


def test_the_zygote_compiles_the_grant_expiry_format_once_and_nothing_else() -> None:
    """strptime compiles its pattern (and locale tables) on first use: the zygote does it once,
    from the constant format, so a forked worker does not; no other pattern is cached there."""
    import subprocess
    import sys
    probe = ("import worker_sdk.zygote, _strptime, worker_sdk.runtime as r; "
             "print(list(_strptime._regex_cache) == [r.EXPIRY_FORMAT])")
    out = subprocess.run([sys.executable, "-s", "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "True"


def test_a_snapshot_entry_is_a_plain_tuple() -> None:
    """A worker builds one entry per base file at its start: a named tuple, with the fields by name."""
    from registry.base_snapshot import Entry, decode, encode
    snap = decode(encode("c" * 40, "t" * 40, [("b.txt", "100644", "o" * 40, b"bb"), ("a.txt", "100755", "p" * 40, b"a")]))
    assert [(e.path, e.mode, e.data) for e in snap.entries] == [("a.txt", "100755", b"a"), ("b.txt", "100644", b"bb")]
    assert isinstance(snap.entries[0], tuple) and Entry._fields == ("path", "mode", "oid", "data")
