"""A pre-initialised worker runtime: `python -s -m worker_sdk.zygote` (started by the local executor).

Starting a fresh interpreter and importing the runtime costs a sandboxed attempt far more CPU than
the rest of its start (site, json, nacl, subprocess, the registry). The zygote pays that once per
run: it imports the runtime (and the handlers of the run's intents, with what their modules
list in `PRELOAD`: torch for litho) and then only forks. It never reads a spawn spec, a grant or a key and
never runs attempt code; it runs outside any sandbox, as the coordinator's user, and its one input
is the coordinator's end of a socket pair (its stdin).

Every attempt still gets a fresh bubblewrap sandbox of its own, built by the coordinator exactly as
for a fresh worker (mounts, namespaces, cgroups, limits); only its program differs: a shell that says
when the sandbox is ready, then waits for the worker's exit status and exits with it, so bwrap's exit
status is the worker's. For each attempt the coordinator sends a request (the worker's environment,
working directory, arguments and cgroups) with descriptors (the attempt's log, bwrap's --info-fd, the ready pipe, the status
pipe). The zygote forks; the child (`_enter`):

1. learns the sandbox's first process from bwrap's info and waits until the sandbox is ready;
2. joins the attempt's cgroups and takes the rlimits the launcher gave the sandbox's first process;
3. enters the sandbox's namespaces (user where it has one, IPC, UTS, network, cgroup, PID, mount);
4. forks again (a process enters a PID namespace through its children); the grandchild starts a
   session of its own, drops every capability (bounding set, permitted, effective, inheritable,
   ambient) and sets no_new_privs, as bwrap's `--cap-drop ALL` leaves a fresh worker, takes the log
   as stdout and stderr, closes every other descriptor, takes the worker's environment and runs
   `worker_sdk.runtime.main` on /dome/spawn.json: its own spec, its own grant, read only now;
5. reports the grandchild's exit status on the status pipe.

Without a sandbox (`--sandbox none`, the request's `sandbox` false) the stub runs on the host and
writes its pid on the ready pipe; the child takes the stub's rlimits, forks the worker (no namespaces
to enter; it keeps the privileges a fresh unsandboxed worker has), receives the attempt's in-memory
files (spawn spec, task facts, key) as descriptors 3-5, kills the worker's process group when the
stub dies first (the executor killed the attempt), and writes the worker's CPU on the request's
second descriptor, since no process of the coordinator's waits for the worker.

No state passes from one attempt to the next: each attempt is a fork of the zygote as it was after
its imports, and the request bytes are parsed in the child only (the zygote clears its buffer after
each fork). Python reseeds `random` in every child; secrets come from the kernel (os.urandom,
libsodium) at use.
"""
from __future__ import annotations

import ctypes
import fcntl
import hashlib
import hmac
import json
import os
import resource
import select
import signal
import socket
import sys
import time

# what an attempt imports: loaded once here, shared copy-on-write by every fork
import worker_sdk.client  # noqa: F401
import worker_sdk.intents.command  # noqa: F401
import worker_sdk.landlock  # noqa: F401
import worker_sdk.proposal  # noqa: F401
import worker_sdk.runtime  # noqa: F401
import registry.schema_lite  # noqa: F401
import _strptime  # noqa: F401,E402 - the grant's expiry is parsed with time.strptime
import registry.toolprofile  # noqa: F401 - the grant's token and the call proofs

# the SpawnSpec's checker, compiled from the schema files once here rather than in every attempt
# (3.5 ms of CPU each); it depends on no request
registry.schema_lite.is_valid("spawn_spec", {})
# and the expiry format's regular expression, which strptime compiles (with its locale tables) on its
# first use: from a constant, so nothing of any attempt is in the cache the children share
time.strptime("2000-01-01T00:00:00Z", worker_sdk.runtime.EXPIRY_FORMAT)
# and OpenSSL's digests a worker uses (its first use of each looks the algorithm up), on empty input
hashlib.sha1(b"")
hmac.digest(b"", b"", "sha256")

MAX_REQUEST = 1 << 20
RLIMITS = (resource.RLIMIT_CPU, resource.RLIMIT_AS, resource.RLIMIT_NOFILE, resource.RLIMIT_NPROC,
           resource.RLIMIT_FSIZE, resource.RLIMIT_CORE)
BASE_FDS = 4  # log, info (or, without a sandbox, cost), ready, status
MAX_FDS = BASE_FDS + 3  # without a sandbox also the attempt's in-memory files: spawn spec, task facts, key
CARRIED_AT = 3  # where the worker finds those (the request's paths name /proc/self/fd/3...)
NAMESPACES = ("user", "ipc", "uts", "net", "cgroup", "pid", "mnt")  # user first: it grants the rest
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 63


LAST_CAP = _last_cap()  # read here: inside the sandbox /proc may say less


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def drop_privileges() -> None:
    """Every capability gone, for good: what `bwrap --cap-drop ALL` leaves a fresh worker."""
    for cap in range(LAST_CAP + 1):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: no such cap
            _check(-1, f"drop capability {cap} from the bounding set")
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(_CapHeader(LINUX_CAPABILITY_VERSION_3, 0)), data), "capset")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _read_all(fd: int) -> bytes:
    out = b""
    while chunk := os.read(fd, 65536):
        out += chunk
    return out


NS_GET_PARENT = 0xB702  # ioctl: the user namespace that owns the one a descriptor names


def _user_chain(pid: int) -> list[int]:
    """Descriptors of the user namespaces between ours and `pid`'s, outermost first; empty where
    they are the same. An unprivileged bwrap nests two (the outer one, where it is root, owns the
    sandbox's other namespaces; the inner one maps the worker's own uid), so a process that is not
    root enters the outer one, then the rest, then the inner one."""
    mine = os.stat("/proc/self/ns/user").st_ino
    fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    chain = [fd]
    try:
        while os.fstat(chain[-1]).st_ino != mine:
            chain.append(fcntl.ioctl(chain[-1], NS_GET_PARENT))
    except OSError:  # not below ours (EPERM): enter only the namespace itself
        for x in chain[1:]:
            os.close(x)
        return [fd]
    os.close(chain.pop())  # our own
    return list(reversed(chain))


def _enter_namespaces(pid: int) -> None:
    fds = {}
    users: list[int] = []
    try:
        for ns in NAMESPACES[1:]:  # opened first: once in the mount namespace, /proc is the sandbox's
            if os.stat(f"/proc/{pid}/ns/{ns}").st_ino != os.stat(f"/proc/self/ns/{ns}").st_ino:
                fds[ns] = os.open(f"/proc/{pid}/ns/{ns}", os.O_RDONLY | os.O_CLOEXEC)
        for ns in ("pid", "mnt", "net"):  # a process without them is not the sandbox we were asked into
            if ns not in fds:
                raise OSError(f"process {pid} has no {ns} namespace of its own")
        users = _user_chain(pid)
        if users:  # the outermost grants the rest
            _check(_libc.setns(users[0], 0), "enter the sandbox's user namespace")
        for ns in NAMESPACES[1:]:
            if ns in fds:
                _check(_libc.setns(fds[ns], 0), f"enter the sandbox's {ns} namespace")
        for fd in users[1:]:  # then down to the worker's own
            _check(_libc.setns(fd, 0), "enter the sandbox's inner user namespace")
    finally:
        for fd in [*fds.values(), *users]:
            os.close(fd)


def _worker(req: dict, log_fd: int, carried: list[int] = (), *, sandboxed: bool = True) -> int:
    """In the sandbox (the grandchild): become a fresh worker, then run the runtime. Without a
    sandbox (`sandboxed` False) it keeps the privileges a fresh worker launched there has."""
    os.setsid()
    if sandboxed:
        drop_privileges()
    _libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in carried]  # out of the way of the targets
    for i, fd in enumerate(high):
        os.dup2(fd, CARRIED_AT + i)
    os.closerange(CARRIED_AT + len(high), 65536)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    from worker_sdk.runtime import main
    return main(list(req["argv"]))


def _run_worker(req: dict, log_fd: int, carried: list[int], sandboxed: bool) -> int:
    """Fork the worker; returns its pid (in the parent)."""
    child = os.fork()
    if child == 0:
        rc = 2
        try:
            rc = _worker(req, log_fd, carried, sandboxed=sandboxed)
        except BaseException as exc:  # noqa: BLE001 - reported in the log like a fresh worker's
            print(json.dumps({"dome_worker_error": {"code": "WORKER_START_FAILED",
                                                    "message": f"{type(exc).__name__}: {exc}"}}),
                  file=sys.stderr)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc if isinstance(rc, int) else 2)
    return child


def _exit_code(st: int) -> int:
    status = os.waitstatus_to_exitcode(st)
    return status if status >= 0 else 128 - status  # a signal: as a shell reports it


def _direct(req: dict, log_fd: int, cost_fd: int, ready_fd: int, carried: list[int]) -> int:
    """No sandbox (`--sandbox none`): the stub runs on the host and says its pid; the worker takes
    its rlimits and dies with it (a kill of the attempt kills the stub's group), and its CPU goes
    back on `cost_fd` (nobody else waits for it). Returns the worker's exit status."""
    line = b""
    while not line.endswith(b"\n") and len(line) < 32:  # the stub keeps its end open: a line, not EOF
        chunk = os.read(ready_fd, 32)
        if not chunk:
            break
        line += chunk
    os.close(ready_fd)
    if not line.strip().isdigit():
        return 2
    stub = int(line)
    stub_fd = os.pidfd_open(stub)
    for res in RLIMITS:
        resource.setrlimit(res, resource.prlimit(stub, res))
    child = _run_worker(req, log_fd, carried, sandboxed=False)
    os.close(log_fd)
    for fd in carried:
        os.close(fd)
    child_fd = os.pidfd_open(child)
    poll = select.poll()
    poll.register(stub_fd, select.POLLIN)
    poll.register(child_fd, select.POLLIN)
    while True:
        ready = {fd for fd, _ in poll.poll()}
        if child_fd in ready:
            break
        if stub_fd in ready:  # the attempt was killed (or the coordinator died): the worker goes too
            for kill in (os.killpg, os.kill):  # its group; itself, should it not have made the group yet
                try:
                    kill(child, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            break
    _, st, usage = os.wait4(child, 0)
    try:
        os.write(cost_fd, f"{round((usage.ru_utime + usage.ru_stime) * 1e9)}\n".encode())
    except OSError:
        pass
    return _exit_code(st)


def _enter(buf: memoryview, fds: list[int]) -> int:
    """The child of one request: into the attempt's sandbox, run the worker there, report its status."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    log_fd, info_fd, ready_fd, status_fd = fds[:BASE_FDS]
    carried = fds[BASE_FDS:]
    status = 2  # the worker could not start
    try:
        req = json.loads(bytes(buf))
        if not req.get("sandbox", True):
            status = _direct(req, log_fd, info_fd, ready_fd, carried)
            return 0
        if carried:
            raise OSError("a sandboxed worker gets its files through its sandbox, not from the zygote")
        info = json.loads(_read_all(info_fd))
        os.close(info_fd)
        if os.read(ready_fd, 1) != b"\n":
            return 2  # the sandbox never came up (bwrap reported why in the log)
        os.close(ready_fd)
        pid = int(info["child-pid"])
        for group in req["cgroups"]:  # counted and limited as the attempt, before anything else runs
            with open(os.path.join(group, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        for res in RLIMITS:  # the launcher's limits, as the sandbox's first process has them
            resource.setrlimit(res, resource.prlimit(pid, res))
        _enter_namespaces(pid)
        child = _run_worker(req, log_fd, [], sandboxed=True)
        os.close(log_fd)
        _, st = os.waitpid(child, 0)
        status = _exit_code(st)
    except BaseException as exc:  # noqa: BLE001
        try:
            os.write(log_fd, (json.dumps({"dome_worker_error": {"code": "WORKER_START_FAILED",
                                                                "message": f"zygote: {exc}"}}) + "\n").encode())
        except OSError:
            pass
    finally:
        try:
            os.write(status_fd, f"{status}\n".encode())
        except OSError:
            pass
    return 0


def passed_fds(ancdata) -> list[int]:
    """The descriptors a message carried (SCM_RIGHTS), in order (pure)."""
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += list(memoryview(data).cast("i"))
    return fds


def serve(sock: socket.socket) -> int:
    """Fork one child per request until the coordinator closes its end."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the coordinator's ^C is the coordinator's
    buf = bytearray(MAX_REQUEST)
    view = memoryview(buf)
    fd_size = socket.CMSG_SPACE(MAX_FDS * 4)
    import gc
    gc.freeze()  # what the imports made stays shared with the children, not copied by the collector
    while True:
        n, anc, _flags, _addr = sock.recvmsg_into([buf], fd_size)
        if n == 0:
            return 0
        fds = passed_fds(anc)
        if BASE_FDS <= len(fds) <= MAX_FDS:
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                sock.close()
                os._exit(_enter(view[:n], fds))
        for fd in fds:
            os.close(fd)
        view[:n] = bytes(n)  # nothing of this request stays for the next child to find


def preload(intents: list[str]) -> None:
    """Import the handlers of the run's intents ahead, and what each handler's module lists in
    `PRELOAD` (torch for litho): only names of the intent table, nothing a request says. Nothing
    here may start a thread or a device: a fork keeps only the thread that forks."""
    import importlib

    from worker_sdk.intents import resolve
    for name in intents:
        try:
            handler = resolve(name)
        except Exception:  # noqa: BLE001 - not in this build: the attempt reports it
            continue
        for module in getattr(sys.modules[handler.__module__], "PRELOAD", ()):
            try:
                importlib.import_module(module)
            except Exception:  # noqa: BLE001 - not ahead then: the worker imports it (and reports why)
                pass


def main(argv: list[str] | None = None) -> int:
    _libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() == 1:
        return 1  # the coordinator is already gone
    preload(sys.argv[1:] if argv is None else argv)
    return serve(socket.socket(fileno=os.dup(0)))


if __name__ == "__main__":
    sys.exit(main())
