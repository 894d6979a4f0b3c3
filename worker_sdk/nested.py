"""The run container's first process in the container executor's nested mode:
`python3 -s -m worker_sdk.nested /dome/ctl` (coordinator/executors/nested.py starts it).

It imports the worker runtime once (worker_sdk.zygote), listens on `/dome/ctl/zygote.sock`
(a directory of the run container that no attempt's sandbox binds) and serves two kinds of
connection from the coordinator:

- the first one accepted is the lifeline: the coordinator holds it open for the whole run; when
  it closes (the run ended or the coordinator died) this process exits, and with it, as the
  container's first process, every process of the container;
- every later one is one attempt. A fork of this process (the attempt's handler) receives the
  attempt's request (the bubblewrap command line the coordinator built for it, the rlimits, and
  the worker's environment, arguments and cgroups) and its log as a descriptor. It starts
  bubblewrap with the zygote's stub (a fresh sandbox of its own: mounts, namespaces, a private
  /tmp and scratch, the attempt's files only), and forks a child that does exactly what the
  host's zygote child does (`worker_sdk.zygote._enter`: join the attempt's cgroups, take the
  rlimits, enter the sandbox's namespaces, drop every capability, run the runtime on its own
  spawn spec). It answers with the worker's exit status once bubblewrap has exited; when the
  coordinator's end closes first (the attempt was killed), it kills bubblewrap, whose sandbox's
  PID namespace takes every process of the attempt with it.

This process never parses a request: the handler does, after the fork. Nothing an attempt does
reaches the next one: each handler is a fresh fork of this process as it was after its imports.
"""
from __future__ import annotations

import fcntl
import json
import os
import resource
import select
import signal
import socket
import sys

from worker_sdk import zygote

SOCKET_NAME = "zygote.sock"
# where bubblewrap and its stub find the info, ready and status pipes (the request's command line
# names them: coordinator/executors/nested.py builds it with these numbers)
INFO_FD, READY_FD, STATUS_FD = 5, 6, 7
DATA_FD = 8  # the attempt's spawn spec, task facts and key, in that order, that bubblewrap copies in
MAX_DATA = 3
MAX_REQUEST = 1 << 20
# what the lifeline says after its probe: a sandbox as an attempt gets one can be built here
PROBE = ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent",
         "--new-session", "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
         "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev",
         "--tmpfs", "/tmp", "--", "/bin/true"]


def _exec_bwrap(argv: list[str], rlimits: list[list[int]], log_fd: int, pipes: tuple[int, int, int],
                data: list[int]) -> None:
    """In the fork that becomes bubblewrap: parent-death signal, the attempt's rlimits, the pipes and
    the attempt's files at their numbers, the log as stdout and stderr, nothing else open."""
    zygote._libc.prctl(zygote.PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for res, val in rlimits:
        resource.setrlimit(int(res), (int(val), int(val)))
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in (log_fd, *pipes, *data)]
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(high[0], 1)
    os.dup2(high[0], 2)
    for fd, at in zip(high[1:], (INFO_FD, READY_FD, STATUS_FD, *range(DATA_FD, DATA_FD + len(data)))):
        os.dup2(fd, at)
    os.closerange(3, INFO_FD)  # nothing else: the stub must see EOF where the zygote's child dies
    os.closerange(DATA_FD + len(data), 65536)
    os.execv(argv[0], argv)


def _recv(conn: socket.socket) -> tuple[bytes, list[int]]:
    data, anc, _flags, _addr = conn.recvmsg(MAX_REQUEST, socket.CMSG_SPACE(4 * (1 + MAX_DATA)))
    return data, zygote.passed_fds(anc)


def attempt(conn: socket.socket) -> int:
    """The handler of one attempt (a fork of the server); returns its own exit status."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    data, fds = _recv(conn)
    if not 1 <= len(fds) <= 1 + MAX_DATA or not data:
        for fd in fds:
            os.close(fd)
        return 2
    log_fd, files = fds[0], fds[1:]
    req = json.loads(data)
    info_r, info_w = os.pipe()
    ready_r, ready_w = os.pipe()
    status_r, status_w = os.pipe()
    bw = os.fork()
    if bw == 0:
        try:
            conn.close()
            _exec_bwrap(list(req["bwrap"]), list(req["rlimits"]), log_fd, (info_w, ready_w, status_r), files)
        finally:
            os._exit(127)
    for fd in (info_w, ready_w, status_r, *files):
        os.close(fd)
    child = os.fork()
    if child == 0:  # the host zygote's child, unchanged: into the sandbox, run the worker, report
        conn.close()
        os._exit(zygote._enter(memoryview(json.dumps(req["worker"]).encode()), [log_fd, info_r, ready_r, status_w]))
    for fd in (log_fd, info_r, ready_r, status_w):
        os.close(fd)
    done = os.pidfd_open(bw)
    poll = select.poll()
    poll.register(done, select.POLLIN)
    poll.register(conn.fileno(), select.POLLIN)
    ready = {fd for fd, _ in poll.poll()}
    if done not in ready:  # the coordinator's end closed: the attempt is killed, all of it
        for pid in (bw, child):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    _, st = os.waitpid(bw, 0)
    os.waitpid(child, 0)
    try:
        conn.send(f"{zygote._exit_code(st)}\n".encode())
    except OSError:
        pass
    return 0


def probe() -> str:
    """"ready", or why no attempt's sandbox can be built here (no bubblewrap in the image, user
    namespaces refused, a /proc that may not be mounted again)."""
    import shutil
    import subprocess
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "refused: the image has no bwrap"
    try:
        r = subprocess.run([bwrap, *PROBE], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"refused: {exc}"
    return "ready" if r.returncode == 0 else "refused: " + " ".join(r.stderr.split())[-300:]


def serve(listener: socket.socket) -> int:
    """Accept the lifeline, then fork a handler per attempt until the lifeline closes."""
    life, _ = listener.accept()
    life.send(probe().encode() + b"\n")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped by the kernel
    import gc
    gc.freeze()
    poll = select.poll()
    poll.register(listener.fileno(), select.POLLIN)
    poll.register(life.fileno(), select.POLLIN)
    while True:
        ready = {fd for fd, _ in poll.poll()}
        if life.fileno() in ready:
            return 0  # the coordinator is gone or done: the container ends with this process
        conn, _ = listener.accept()
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            listener.close()
            life.close()
            status = 2
            try:
                status = attempt(conn)
            finally:
                os._exit(status)
        conn.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    ctl = args[0] if args else "/dome/ctl"
    path = os.path.join(ctl, SOCKET_NAME)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    old = os.umask(0o077)  # the socket: this user only (the coordinator is root or this user)
    try:
        listener.bind(path)
    finally:
        os.umask(old)
    listener.listen(64)
    return serve(listener)


if __name__ == "__main__":
    sys.exit(main())
