"""LocalExecutor: each attempt is a fresh `python -m worker_sdk` under bubblewrap.

The worker process is the leader of its own process group; `kill` sends
SIGKILL to the whole group and to every process left in the attempt's pids
cgroup, and bwrap's PID namespace takes the rest down with it. With
`sandbox="none"` (explicit opt-in) the same worker runs unconfined.

`dispatch` only queues the start: a spawner thread (`spawner.py`) writes the
attempt's files (SpawnSpec, key, task facts), takes its cgroups from the
executor's slots (emptied groups an earlier attempt used, see `_Slot`) and
starts the process, so the run loop's thread neither writes them nor waits on a
fork. A kill of an attempt still queued cancels it (it never
starts); a start that fails comes back from `poll` with its typed error.
"""
from __future__ import annotations

import functools
import itertools
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Mapping

from registry.sandbox_verdict import counter_violations

from .attempts import close_fds, fd_of, log_file, log_tail
from .base import AttemptFiles, ExitInfo, Limits, dispatch_error
from .sandbox import (bwrap_argv, cgroup_cpu_ns, cpuacct_cgroup_parent, cpus_per_worker, direct_argv, direct_env,
                      launch_argv, memory_cgroup_parent, oom_kills, pids_cgroup_parent, read_cgroup_file,
                      refused_forks, require_bwrap)
from .spawner import Spawner
from .zygote import Zygote, direct_request, zygote_argv
from .zygote import worker_start as start_mode

STDERR_TAIL = 4096


def _key_pipe(path: Path | None) -> int | None:
    """A pipe (read end) holding the attempt's key, for bwrap to copy into the sandbox."""
    if path is None or not path.is_file():
        return None
    data = path.read_bytes()
    r, w = os.pipe()
    try:
        os.write(w, data)  # a key is far smaller than a pipe's buffer
    finally:
        os.close(w)
    return r


@dataclass
class _Proc:
    """One attempt: queued until a spawner thread starts it, then its process."""
    files: AttemptFiles | None  # None until `prepare` has written them (on the spawner thread)
    prepare: Callable[[], AttemptFiles] | None = None
    slot: _Slot | None = None  # its cgroups, from the executor's slots
    popen: subprocess.Popen | None = None
    state: str = "queued"  # queued -> started | failed (the spawn raised) | cancelled (killed before it started)
    killed: str | None = None
    cost_fd: int | None = None  # without a sandbox, from the zygote: the worker's CPU (nobody here reaps it)
    error: dict[str, Any] | None = None  # why the spawn failed (the typed error the run loop records)
    lock: threading.Lock = field(default_factory=threading.Lock)


SPAWN_THREADS = 1  # one is enough: a vfork + exec is a few ms; more only contend for the GIL
STALE_CGROUP_S = 120  # an empty per-attempt cgroup (`ne-*`, before slots) older than this has no coordinator
SLOT_PREFIX = "slot-"  # slot-<pid namespace>-<coordinator pid>-<n>: an executor's reusable cgroups
RMDIR_WAIT_S = 1.0  # at shutdown, how long a group whose last process is still being released may take
_SLOT_NAMES = itertools.count()  # one count per process: two executors of one coordinator never share a name


@dataclass
class _Slot:
    """An attempt's cgroups (controller -> directory), handed to the next attempt once empty:
    making, limiting and removing two groups per attempt cost more coordinator CPU than the
    rest of a start. The limit counters only grow, so each attempt is judged on what it
    added: `counted` holds them as the slot's previous attempt left them."""
    groups: dict[str, Path]
    counted: dict[str, int] = field(default_factory=lambda: {"refused_forks": 0, "oom_kills": 0, "cpu_ns": 0})


@dataclass
class CpuTally:
    """The attempts' CPU as the executor saw it: `process_s`, the attempt processes it reaped
    (with what they reaped: the whole worker where no sandbox is; the launcher and bwrap's
    outer process under bwrap, whose inner processes nobody waits for), and `group_s`, what
    the attempts' cgroups counted (every process of the attempt, the launcher after it joined)."""
    process_s: float = 0.0
    group_s: float = 0.0
    groups: int = 0  # attempts whose cgroup counted
    helper: Callable[[], float] = lambda: 0.0  # CPU of a live helper the attempts share (the zygote)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_process(self, seconds: float) -> None:
        with self.lock:
            self.process_s += seconds

    def add_group(self, ns: int) -> None:
        with self.lock:
            self.group_s += max(0, ns) / 1e9
            self.groups += 1

    def snapshot(self) -> dict[str, float | int]:
        helper = self.helper()  # counted with the workers: it is their start-up, paid once per run
        with self.lock:
            return {"process_s": self.process_s, "group_s": self.group_s + helper, "groups": self.groups}


@functools.lru_cache(maxsize=1)
def _pid_namespace() -> str:
    """This process's PID namespace (its inode): a pid names a coordinator only within it."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def _slot_prefix(pid: int) -> str:
    return f"{SLOT_PREFIX}{_pid_namespace()}-{pid}-"


def _owner_gone(name: str) -> bool:
    """Whether the coordinator that named this slot no longer runs: one of this PID namespace
    (another's pids mean nothing here) whose pid is gone."""
    ns, _, rest = name[len(SLOT_PREFIX):].partition("-")
    pid = rest.partition("-")[0]
    if ns != _pid_namespace() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _kill_members(cg: Path) -> bool:
    """SIGKILL every process in the group until none is listed; True when it is empty."""
    for _ in range(50):
        try:
            left = [int(x) for x in read_cgroup_file(cg / "cgroup.procs").split()]
        except (OSError, ValueError):
            return False
        if not left:
            return True
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return False


def _rmdir(cg: Path, wait_s: float = 0.0) -> bool:
    """Remove an empty cgroup; a group whose last process the kernel is still releasing refuses
    (EBUSY) for a moment, so try again for up to `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            cg.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)


def _open_log(path: Path) -> BinaryIO:
    """The attempt's one log, opened for writing; its directory made where another hand wrote the
    attempt's files without it."""
    try:
        return open(path, "wb")
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return open(path, "wb")


class LocalExecutor:
    name = "local"
    deferred_files = True  # dispatch takes a function that writes the attempt's files (run on the spawner)

    def __init__(self, *, sandbox: str = "bwrap", max_concurrency: int = 4, limits: Limits | None = None,
                 spawn_threads: int = SPAWN_THREADS, worker_start: str | None = None,
                 intents: tuple[str, ...] = ()) -> None:
        if sandbox not in ("bwrap", "none"):
            raise ValueError(f"unknown sandbox {sandbox!r}")
        if sandbox == "bwrap":
            self.bwrap = require_bwrap()
        self.sandbox = sandbox
        self.max_concurrency = max_concurrency
        self.limits = limits or Limits()
        self.cgroup_parent = pids_cgroup_parent() if sandbox == "bwrap" else None
        memory = memory_cgroup_parent() if sandbox == "bwrap" else None
        self.memory_parent, self.memory_version = memory if memory else (None, None)
        # the attempts' CPU: under bwrap it shows in no process accounting of the coordinator's
        self.cpu_parent = cpuacct_cgroup_parent() if sandbox == "bwrap" else None
        self.cpu = CpuTally()
        for parent in (self.cgroup_parent, self.memory_parent, self.cpu_parent):  # left by a coordinator that was killed
            for child in (parent.iterdir() if parent is not None else ()):
                try:
                    if child.name.startswith(SLOT_PREFIX) and _owner_gone(child.name) and child.is_dir():
                        _kill_members(child)  # what its attempts left running (a sandbox's outer bwrap)
                        _rmdir(child, RMDIR_WAIT_S)
                    # not one another coordinator on this host made a moment ago and has not filled yet
                    elif child.name.startswith("ne-") and child.is_dir() \
                            and time.time() - child.stat().st_mtime > STALE_CGROUP_S:
                        child.rmdir()
                except OSError:
                    pass
        self._procs: dict[str, _Proc] = {}
        self._lock = threading.Lock()
        self._free: list[_Slot] = []  # empty slots, ready for the next attempt
        self._slots: list[_Slot] = []  # every slot this executor made and has not removed
        self.spawner = Spawner(spawn_threads)  # Popen off the run loop's thread (0: on the caller's)
        # sandboxed workers forked from a pre-initialised runtime (see zygote.py), started with the first
        self.worker_start = start_mode(worker_start)
        self._zygote: Zygote | None = None
        self.intents = tuple(intents)  # the run's: the zygote imports their handlers ahead

    def _take_slot(self) -> _Slot | None:
        """An empty slot for an attempt: a free one, else a new one (None where the host lets
        dome create no cgroup)."""
        if self.cgroup_parent is None and self.memory_parent is None and self.cpu_parent is None:
            return None
        with self._lock:
            while self._free:
                slot = self._free.pop()
                if all(cg.is_dir() for cg in slot.groups.values()):
                    return slot
                self._slots.remove(slot)  # removed under us: its attempt must not run unconfined
        return self._make_slot()

    def _make_slot(self) -> _Slot | None:
        """A new slot: the pids and memory cgroups the host lets dome create, with their limits."""
        name = f"{_slot_prefix(os.getpid())}{next(_SLOT_NAMES)}"
        out: dict[str, Path] = {}
        mem_file = "memory.limit_in_bytes" if self.memory_version == "v1" else "memory.max"
        for controller, parent, limit_file, value in (
                ("pids", self.cgroup_parent, "pids.max", self.limits.max_processes),
                ("memory", self.memory_parent, mem_file, self.limits.memory_mb * 1024 * 1024),
                ("cpuacct", self.cpu_parent, None, 0)):
            if parent is None:
                continue
            cg = parent / name
            try:
                cg.mkdir(exist_ok=True)
                if limit_file is not None:  # cpuacct only counts
                    (cg / limit_file).write_text(str(value))
                out[controller] = cg
            except OSError:
                _rmdir(cg)
                continue
            if controller == "memory":  # no escape into swap: the limit is on memory + swap where it can be
                for swap_file, swap in (("memory.memsw.limit_in_bytes", value), ("memory.swap.max", 0)):
                    try:
                        (cg / swap_file).write_text(str(swap))
                    except OSError:
                        pass
        if not out:
            return None
        slot = _Slot(out)
        with self._lock:
            self._slots.append(slot)
        return slot

    def dispatch(self, spec: Mapping[str, Any], files: AttemptFiles | Callable[[], AttemptFiles]) -> None:
        """Queue the attempt's start and return: a spawner thread writes its files (when `files` is the
        function that writes them; it is called with `in_memory=True`, see `write_attempt`), makes its
        cgroups and starts it. A start that fails comes back
        from `poll` with its typed error (`ExitInfo.spawn_error`)."""
        neid = spec["node_execution_id"]
        proc = _Proc(files, None) if isinstance(files, AttemptFiles) else _Proc(None, files)
        with self._lock:
            self._procs[neid] = proc
        self.spawner.submit(lambda: self._start(neid, proc))

    def _start(self, neid: str, proc: _Proc) -> None:
        with proc.lock:  # a kill waits for a start in progress, and a killed attempt is never started
            prepare, proc.prepare = proc.prepare, None  # the attempt's key goes with it
            if proc.state != "queued":
                return
            try:
                if proc.files is None and prepare is not None:
                    # in memory: the spawn spec, task facts and key never touch the disk
                    proc.files = prepare(in_memory=True)
                proc.popen = self._popen(neid, proc)
                proc.state = "started"
            except Exception as exc:  # noqa: BLE001 - the run loop records it as the attempt's failure
                proc.error = dispatch_error(exc)
                proc.state = "failed"
            finally:
                if proc.files is not None:
                    close_fds(proc.files)  # the worker holds its own copies (or never will)

    def _popen(self, neid: str, proc: _Proc) -> subprocess.Popen:
        files = proc.files
        assert files is not None
        slot = proc.slot = self._take_slot()
        cgs = slot.groups if slot is not None else {}
        key_fd = None  # a pipe holding the key of a key file, for bwrap to copy
        cpus = cpus_per_worker(self.max_concurrency)  # workers size their thread pools from it
        try:
            if self._zygote_ready():
                if self.sandbox == "bwrap":
                    return self._popen_zygote(files, slot, cpus, log_file(files))
                popen = self._popen_direct(proc, cpus, log_file(files))
                if popen is not None:
                    return popen
            if self.sandbox == "bwrap":
                mem_key = fd_of(files.worker_key)
                key_fd = _key_pipe(files.worker_key) if mem_key is None else None
                argv, env = bwrap_argv(files, bwrap=self.bwrap, limits=self.limits, cgroups=cgs,
                                       worker_key_fd=key_fd if mem_key is None else mem_key, cpus=cpus,
                                       spawn_fd=fd_of(files.spawn_json), task_fd=fd_of(files.task_json),
                                       counted=slot.counted if slot is not None else None), {}
            else:
                argv, env = direct_argv(files), direct_env(files, cpus=cpus)
            # limits and cgroups set by the launcher: no preexec_fn, so vfork rather than a full fork
            argv = launch_argv(self.limits, cgs, argv)
            # one log per attempt (stdout and stderr together), in its directory: one file created, not two
            path = log_file(files)
            log = _open_log(path)
            with log:
                return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True, close_fds=True,
                                        pass_fds=(*files.fds, *((key_fd,) if key_fd is not None else ())))
        finally:
            if key_fd is not None:
                os.close(key_fd)
                files.worker_key.unlink(missing_ok=True)  # bwrap holds its copy: the key lives only in the sandbox

    def _zygote_ready(self) -> bool:
        """Whether this attempt starts from the zygote: started with the first, given up on for
        good once it could not start or has died (the rest start fresh)."""
        if self.worker_start != "zygote":
            return False
        if self._zygote is None:
            try:
                self._zygote = Zygote(self.intents)
            except OSError:
                self.worker_start = "fresh"
                return False
            self.cpu.helper = self._zygote.cpu_s
        if not self._zygote.alive:
            self.worker_start = "fresh"
            return False
        return True

    def _popen_zygote(self, files: AttemptFiles, slot: _Slot | None, cpus: int, path: Path) -> subprocess.Popen:
        """The attempt's sandbox, built as for a fresh worker, with the stub as its program; the
        zygote forks the worker into it (zygote.py)."""
        assert self._zygote is not None
        cgs = slot.groups if slot is not None else {}
        info_r, info_w = os.pipe()
        ready_r, ready_w = os.pipe()
        status_r, status_w = os.pipe()
        key_fd = None
        theirs = [info_r, ready_r, status_w]  # the zygote's (with the log)
        mine = [info_w, ready_w, status_r]  # bwrap's
        try:
            mem_key = fd_of(files.worker_key)
            key_fd = _key_pipe(files.worker_key) if mem_key is None else None
            argv = bwrap_argv(files, bwrap=self.bwrap, limits=self.limits, cgroups=cgs,
                              worker_key_fd=key_fd if mem_key is None else mem_key, cpus=cpus,
                              spawn_fd=fd_of(files.spawn_json), task_fd=fd_of(files.task_json),
                              counted=slot.counted if slot is not None else None)
            argv, request = zygote_argv(argv, info_w, ready_w, status_r)
            request["cgroups"] = [str(g) for g in cgs.values()]
            log = _open_log(path)
            with log:
                popen = subprocess.Popen(launch_argv(self.limits, cgs, argv), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                                         pass_fds=(*files.fds, *mine, *((key_fd,) if key_fd is not None else ())))
                for fd in mine:
                    os.close(fd)
                mine = []
                # refused: the stub reads no status and exits 2, a worker that could not start
                self._zygote.spawn(request, [log.fileno(), *theirs])
            return popen
        finally:
            for fd in (*mine, *theirs, *((key_fd,) if key_fd is not None else ())):
                os.close(fd)
            if key_fd is not None:
                files.worker_key.unlink(missing_ok=True)  # bwrap holds its copy: the key lives only in the sandbox

    def _popen_direct(self, proc: _Proc, cpus: int, path: Path) -> subprocess.Popen | None:
        """No sandbox: a stub on the host under the launcher a fresh worker gets; the zygote forks the
        worker beside it with the attempt's in-memory files (zygote.py). None when the command line
        is not the worker's (it then starts as it is)."""
        assert self._zygote is not None and proc.files is not None
        files = proc.files
        ready_r, ready_w = os.pipe()
        status_r, status_w = os.pipe()
        cost_r, cost_w = os.pipe()
        theirs = [cost_w, ready_r, status_w]
        mine = [ready_w, status_r]
        try:
            carried = [fd for fd in (fd_of(files.spawn_json), fd_of(files.task_json), fd_of(files.worker_key))
                       if fd is not None]
            try:
                stub, request = direct_request(direct_argv(files), direct_env(files, cpus=cpus), os.getcwd(),
                                               carried, ready_w, status_r)
            except ValueError:
                return None
            log = _open_log(path)
            with log:
                popen = subprocess.Popen(launch_argv(self.limits, {}, stub), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                                         pass_fds=mine)
                for fd in mine:
                    os.close(fd)
                mine = []
                proc.cost_fd, cost_r = cost_r, -1
                self._zygote.spawn(request, [log.fileno(), *theirs, *carried])
            return popen
        finally:
            for fd in (*mine, *theirs, *((cost_r,) if cost_r >= 0 else ())):
                os.close(fd)

    def _read_cost(self, proc: _Proc) -> None:
        """The unsandboxed worker's CPU, as the zygote's child wrote it before the stub exited."""
        fd, proc.cost_fd = proc.cost_fd, None
        if fd is None:
            return
        try:
            os.set_blocking(fd, False)
            data = os.read(fd, 64)
            if data.strip().isdigit():
                self.cpu.add_process(int(data) / 1e9)
        except OSError:
            pass
        finally:
            os.close(fd)

    def running(self) -> list[str]:
        with self._lock:
            return sorted(self._procs)

    def _sweep(self, proc: _Proc) -> list[dict[str, Any]]:
        """Kill what is left of the attempt in its cgroups, read the limits it hit (what the
        counters added since the slot's previous attempt), and free the slot for the next one."""
        slot, proc.slot = proc.slot, None
        if slot is None:
            return []
        # killed first: once a group is empty nothing in it can fork or fault, so its counters are final
        empty = all([_kill_members(cg) for cg in slot.groups.values()])
        pids, mem = slot.groups.get("pids"), slot.groups.get("memory")
        forks = refused_forks(pids) if pids is not None else 0
        kills = oom_kills(mem, self.memory_version) if mem is not None else 0
        violations = counter_violations(refused_forks=forks, oom_kills=kills, before=slot.counted,
                                        max_processes=self.limits.max_processes, memory_mb=self.limits.memory_mb)
        cpu_group = slot.groups.get("cpuacct") or slot.groups.get("pids")  # v2: every group has cpu.stat
        cpu_ns = cgroup_cpu_ns(cpu_group) if cpu_group is not None else None
        if cpu_ns is not None:
            self.cpu.add_group(cpu_ns - slot.counted.get("cpu_ns", 0))
        slot.counted = {"refused_forks": forks, "oom_kills": kills, "cpu_ns": cpu_ns or 0}
        if empty:  # one that still holds a process is never handed out again (shutdown removes it)
            with self._lock:
                self._free.append(slot)
        return violations

    def poll(self) -> list[ExitInfo]:
        out: list[ExitInfo] = []
        with self._lock:
            done = [(n, p) for n, p in self._procs.items()
                    if p.state in ("failed", "cancelled") or (p.state == "started" and self._reaped(p.popen))]
            for n, _ in done:
                del self._procs[n]
        for neid, proc in done:
            self._read_cost(proc)
            violations = self._sweep(proc)
            if proc.state != "started":  # never ran: no exit status, no log worth reading
                out.append(ExitInfo(neid, None, signal=int(signal.SIGKILL) if proc.state == "cancelled" else None,
                                    spawn_error=proc.error))
                continue
            rc = proc.popen.returncode
            tail = log_tail(log_file(proc.files), STDERR_TAIL)
            out.append(ExitInfo(neid, rc if rc is not None and rc >= 0 else None,
                                signal=-rc if rc is not None and rc < 0 else None,
                                stderr_tail=tail, violations=violations))
        return out

    def _reaped(self, popen: subprocess.Popen) -> bool:
        """Whether the attempt's process has exited (reaped here with its resource usage: the
        launcher and bwrap's outer process, or the whole worker where no sandbox is)."""
        if popen.returncode is not None:
            return True
        try:
            pid, status, usage = os.wait4(popen.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere (Popen.wait): its usage is in the children's total
            return popen.poll() is not None
        if pid == 0:
            return False
        popen.returncode = os.waitstatus_to_exitcode(status)
        self.cpu.add_process(usage.ru_utime + usage.ru_stime)
        return True

    def kill(self, node_execution_id: str, reason: str) -> None:
        with self._lock:
            proc = self._procs.get(node_execution_id)
        if proc is None:
            return
        with proc.lock:  # waits for a start in progress; a queued attempt is never started
            proc.killed = reason
            if proc.state == "queued":
                proc.state, proc.prepare = "cancelled", None
            if proc.state != "started":
                return
        try:
            os.killpg(proc.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        slot = proc.slot
        for cg in (slot.groups.values() if slot is not None else ()):
            _kill_members(cg)

    def shutdown(self) -> None:
        for neid in self.running():
            self.kill(neid, "shutdown")
        with self._lock:
            procs = list(self._procs.values())
        for p in procs:
            if p.popen is None:
                continue
            try:
                p.popen.wait(5)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass
        self.poll()
        self.spawner.close()  # only now: a worker dies with the thread that started it
        if self._zygote is not None:
            self._zygote.close()
        with self._lock:
            slots, self._slots, self._free = self._slots, [], []
        for slot in slots:  # nothing of the executor's is left in the host's cgroups
            for cg in slot.groups.values():
                _kill_members(cg)
                _rmdir(cg, RMDIR_WAIT_S)
