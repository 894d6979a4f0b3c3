"""The coordinator's side of the pre-initialised worker runtime (worker_sdk/zygote.py).

A sandboxed attempt normally runs `python -s -m worker_sdk` inside its bwrap sandbox: a fresh
interpreter and the runtime's imports, most of an attempt's CPU. With the zygote the sandbox is
built the same way (the same bwrap options, cgroups, rlimits, files) but its program is a shell
(`--as-pid-1`, so nothing in the sandbox can signal it) that reports the sandbox ready and then
waits for the worker's exit status; the zygote forks a worker into that sandbox's namespaces,
which drops every capability before it reads its spawn spec. bwrap still exits with the worker's
status, so the executor supervises, kills and sweeps an attempt exactly as before.

Without a sandbox the same zygote starts the workers: the executor starts a stub on the host
(under the same launcher a fresh worker gets) and the zygote forks the worker beside it
(`direct_request`); the worker's CPU comes back on a pipe, since no process of the coordinator's
reaps it.

`DOME_WORKER_START=fresh` (or `LocalExecutor(worker_start="fresh")`) starts every worker as a
fresh interpreter instead; so does an executor whose zygote could not start or has died.
"""
from __future__ import annotations

import array
import json
import os
import socket
import subprocess
import sys
from typing import Any, Mapping, Sequence

from .sandbox import dome_source_roots

START_ENV = "DOME_WORKER_START"  # "zygote" (the default under bwrap) or "fresh"
# pid 1 of the sandbox: say "ready" on one pipe, then exit with the status read from another
# (through /proc: a POSIX shell's redirections name descriptors 0-9 only)
STUB = 'echo > /proc/self/fd/{ready}; read rc < /proc/self/fd/{status} || exit 2; exit "$rc"'
# without a sandbox: the stub runs on the host and tells the zygote its pid (whose rlimits the
# worker takes and with whose death it is killed)
DIRECT_STUB = 'echo $$ > /proc/self/fd/{ready}; read rc < /proc/self/fd/{status} || exit 2; exit "$rc"'
CARRIED_AT = 3  # worker_sdk.zygote.CARRIED_AT: where the worker finds the attempt's in-memory files


def worker_start(explicit: str | None = None) -> str:
    choice = explicit or os.environ.get(START_ENV) or "zygote"
    if choice not in ("zygote", "fresh"):
        raise ValueError(f"{START_ENV} must be zygote or fresh, not {choice!r}")
    return choice


def zygote_argv(argv: Sequence[str], info_fd: int, ready_fd: int, status_fd: int) -> tuple[list[str], dict[str, Any]]:
    """A fresh worker's bwrap command line (`bwrap_argv`) turned into its zygote form (pure):
    the same options, plus `--as-pid-1` and `--info-fd`, and the stub instead of the interpreter;
    and what the zygote's child needs to become that worker (its environment, working directory
    and arguments, which bwrap would have given the interpreter). The stub writes a line to
    `ready_fd` once it runs (the sandbox is complete) and exits with the number it reads from
    `status_fd` (2 where none comes: the zygote is gone)."""
    cut = len(argv) - 1 - list(reversed(argv)).index("--")
    opts, command = list(argv[:cut]), list(argv[cut + 1:])
    env: dict[str, str] = {}
    cwd = "/"
    i = 1
    while i < len(opts):
        if opts[i] == "--setenv":
            env[opts[i + 1]] = opts[i + 2]
            i += 3
            continue
        if opts[i] == "--chdir":
            cwd = opts[i + 1]
        i += 1
    if "-m" not in command or command[command.index("-m") + 1] != "worker_sdk":
        raise ValueError("not a worker's command line")
    worker_args = command[command.index("-m") + 2:]
    stub = ["/bin/sh", "-c", STUB.format(ready=int(ready_fd), status=int(status_fd))]
    return [*opts, "--as-pid-1", "--info-fd", str(info_fd), "--", *stub], {
        "env": env, "cwd": cwd, "argv": worker_args}


def direct_request(argv: Sequence[str], env: Mapping[str, str], cwd: str, fds: Sequence[int],
                   ready_fd: int, status_fd: int) -> tuple[list[str], dict[str, Any]]:
    """An unsandboxed worker's command line (`direct_argv`) and environment (`direct_env`) turned into
    the stub's command line and the zygote's request (pure). `fds`: the attempt's in-memory files
    (`/proc/self/fd/N` in the arguments and environment), which the worker finds at 3, 4, 5."""
    command = list(argv)
    if "-m" not in command or command[command.index("-m") + 1] != "worker_sdk":
        raise ValueError("not a worker's command line")
    moved = {f"/proc/self/fd/{fd}": f"/proc/self/fd/{CARRIED_AT + i}" for i, fd in enumerate(fds)}
    stub = ["/bin/sh", "-c", DIRECT_STUB.format(ready=int(ready_fd), status=int(status_fd))]
    return stub, {"sandbox": False, "env": {k: moved.get(v, v) for k, v in env.items()}, "cwd": cwd,
                  "argv": [moved.get(a, a) for a in command[command.index("-m") + 2:]], "cgroups": []}


def live_cpu_s(pid: int) -> float:
    """A live process's own CPU so far (all its threads; not its children's); 0 once it is gone
    (then its parent's wait counts it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    except (OSError, ValueError, IndexError):
        return 0.0


class Zygote:
    """The run's zygote process and the socket its requests go through (one spawner thread uses it).
    `intents`: the run's intents, whose handlers it imports ahead."""

    def __init__(self, intents: Sequence[str] = ()) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        src = str(dome_source_roots()[0].parent)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": src, "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            self.proc = subprocess.Popen([sys.executable, "-s", "-m", "worker_sdk.zygote", *intents], stdin=theirs,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd="/",
                                         start_new_session=True, close_fds=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock = ours
        self.alive = True

    def spawn(self, request: Mapping[str, Any], fds: Sequence[int]) -> bool:
        """Hand one attempt to the zygote; False when it is gone (the attempt's stub then exits 2)."""
        if not self.alive or self.proc.poll() is not None:
            self.alive = False
            return False
        try:
            self.sock.sendmsg([json.dumps(request).encode()],
                              [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
            return True
        except OSError:
            self.alive = False
            return False

    def cpu_s(self) -> float:
        """The zygote's own CPU so far (its imports and forks; not its children's), while it lives."""
        return live_cpu_s(self.proc.pid)

    def close(self) -> None:
        self.alive = False
        self.sock.close()  # the zygote's end reads EOF and it exits
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            self.proc.kill()
            self.proc.wait()
