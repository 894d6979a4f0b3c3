"""The container executor's nested mode: one run container per worker image, a fresh bubblewrap
sandbox per attempt inside it (worker_sdk/nested.py is the container's side).

A fresh container per attempt costs podman and runc about 80 ms of machine CPU before the worker
runs (create, conmon, start, cleanup). Here the run container is started once, confined as an
attempt's container is (no network, read-only image root, an unprivileged user, every capability
dropped, no_new_privs), and its first process imports the worker runtime once. Each attempt then
gets, inside it, what the local executor's zygote gives an attempt on the host:

- a bubblewrap sandbox of its own (`bwrap_argv` with the image's view of the system: `image_view`):
  new PID, network, IPC, UTS and cgroup namespaces, a fresh size-capped /tmp and scratch, the image
  root read-only, the attempt's spawn spec, task facts and key copied in from descriptors the
  coordinator passes (never a file another attempt could open), the run's gateway socket, and
  nothing of the run container's control directory (/dome/ctl) or cgroup directories (/dome/cg);
- its own memory and pids cgroups, made by the coordinator on the host below the run's cgroup
  (`RunContainer._attempt_groups`) and bound into the run container's /dome/cg; the zygote's child joins them
  before it enters the sandbox, so every process of the attempt is limited and counted there, and
  the coordinator reads their counters (OOM kills, refused forks) and kills what is left in them
  when the attempt has ended;
- the rlimits of a fresh worker (CPU seconds, open files, file size, no core dumps), set on
  bubblewrap before it starts and taken by the worker from the sandbox's first process.

The coordinator holds the lifeline: a connection to the container's first process that, when it
closes (the run ended, the coordinator died), ends that process and with it the container (created
with `remove`, so podman deletes it; a container left by a coordinator killed outright is swept by
the next one, as attempt containers are, by its labels).

Needs: bubblewrap in the image, user namespaces inside the container, and per-attempt cgroups (cgroup
v1 as root: the run's cgroup parent). Where one is missing the executor runs every attempt in a fresh
container and says why on stderr.
"""
from __future__ import annotations

import array
import functools
import json
import os
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from registry.sandbox_verdict import counter_violations

from .attempts import log_file, log_tail
from .base import AttemptFiles, ExitInfo, Limits
from .local import _kill_members, _rmdir
from .podman_api import PodmanApiError, PodmanService
from .sandbox import CGROUP_FS, ETC_FILES, IN_SOCKET, MIB, _rlimits, bwrap_argv, oom_kills, refused_forks
from .zygote import zygote_argv

MODE_ENV = "DOME_CONTAINER_MODE"  # "nested" (the default) or "fresh" (a container per attempt)
IN_CTL = "/dome/ctl"  # the run container's control directory: its socket; no attempt binds it
IN_RUN = "/dome/run"  # the run's shared files as the run container sees them
IN_CG = "/dome/cg"  # the attempts' cgroups (one directory per controller)
CONTROLLERS = ("memory", "pids")
SOCKET_NAME = "zygote.sock"  # worker_sdk.nested.SOCKET_NAME
INFO_FD, READY_FD, STATUS_FD, DATA_FD = 5, 6, 7, 8  # worker_sdk.nested's numbers
IMAGE_SRC = "/opt/dome/src"  # ops/container/Containerfile: dome's packages and the venv in the image
IMAGE_PYTHON = "/opt/dome/venv/bin/python3"
IMAGE_PATH = "/opt/dome/venv/bin:/usr/local/bin:/usr/bin:/bin"
CONTAINER_UID = 10001
STATUS_KILLED = 137


def container_mode(explicit: str | None = None) -> str:
    choice = explicit or os.environ.get(MODE_ENV) or "nested"
    if choice not in ("fresh", "nested"):
        raise ValueError(f"{MODE_ENV} must be fresh or nested, not {choice!r}")
    return choice


# what podman masks in a container's /proc (its defaults): the run container has them unmasked (a
# sandbox may mount its own /proc only then), so each attempt's sandbox masks them in its own
PROC_MASKED = ("acpi", "kcore", "keys", "latency_stats", "timer_list", "timer_stats", "sched_debug", "scsi")


@functools.lru_cache(maxsize=1)
def proc_masks() -> tuple[tuple[str, bool], ...]:
    """(name, is a directory) of PROC_MASKED as this kernel has them (the container's is the same)."""
    return tuple((n, os.path.isdir(f"/proc/{n}")) for n in PROC_MASKED if os.path.exists(f"/proc/{n}"))


def image_view(tmp_mb: int, masks: tuple[tuple[str, bool], ...] | None = None) -> tuple[list[str], list[Path]]:
    """(pure with `masks`) The read-only system an attempt's sandbox gets inside the run container:
    the image's merged /usr (and its links), a few /etc files, dome's packages and the venv under
    /opt/dome, a fresh /proc with podman's masks and /dev; what `host_view` gives a sandbox on the
    host. Nothing of /dome."""
    a = ["/usr/bin/bwrap", "--size", str(int(tmp_mb) * MIB), "--tmpfs", "/tmp", "--ro-bind", "/usr", "/usr",
         "--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin", "--symlink", "usr/lib", "/lib",
         "--symlink", "usr/lib64", "/lib64"]
    for name in ETC_FILES:
        a += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    a += ["--ro-bind", "/opt/dome", "/opt/dome", "--proc", "/proc"]
    for name, is_dir in proc_masks() if masks is None else masks:
        a += ["--tmpfs", f"/proc/{name}", "--remount-ro", f"/proc/{name}"] if is_dir else \
            ["--ro-bind", "/dev/null", f"/proc/{name}"]
    a += ["--dev", "/dev", "--dir", "/dome"]
    return a, [Path(IMAGE_SRC) / "registry", Path(IMAGE_SRC) / "worker_sdk"]


def in_container(files: AttemptFiles) -> AttemptFiles:
    """(pure) The attempt's files as the run container sees them; its spawn spec, task facts and key
    come as descriptors (`--ro-bind-data`), so their paths are not used."""
    return AttemptFiles(spawn_json=files.spawn_json, scratch=files.scratch, base_git=Path(IN_RUN) / "base.git",
                        gateway_socket=Path(IN_RUN) / "gateway.sock", coordinator_pub=Path(IN_RUN) / "coordinator.pub",
                        log_dir=files.log_dir, task_json=files.task_json, worker_key=files.worker_key,
                        egress_socket=Path(IN_RUN) / "egress.sock" if files.egress_socket else None)


def attempt_request(files: AttemptFiles, neid: str, limits: Limits, cpus: int,
                    gateway_path: str = IN_SOCKET) -> dict[str, Any]:
    """(pure) What the run container's handler gets for one attempt: the bubblewrap command line in
    its zygote form, the rlimits to start it under, and the zygote child's request (the worker's
    environment, arguments and cgroups). The data descriptors follow the log in the message:
    spawn spec, then task facts and key where the attempt has them."""
    n = iter(range(DATA_FD, DATA_FD + 3))
    spawn_fd = next(n)
    task_fd = next(n) if files.task_json else None
    key_fd = next(n) if files.worker_key else None
    groups = {c: Path(IN_CG) / c / neid for c in CONTROLLERS}
    argv = bwrap_argv(in_container(files), python=IMAGE_PYTHON, limits=limits, cgroups=groups, cpus=cpus,
                      spawn_fd=spawn_fd, task_fd=task_fd, worker_key_fd=key_fd,
                      view=image_view(limits.tmp_mb), env_path=IMAGE_PATH)
    at = next(i for i in range(len(argv) - 2) if argv[i] == "--bind" and argv[i + 2] == IN_SOCKET)
    argv[at + 2] = gateway_path
    bw, worker = zygote_argv(argv, INFO_FD, READY_FD, STATUS_FD)
    worker["cgroups"] = [str(g) for g in groups.values()]
    return {"bwrap": bw, "rlimits": [[int(res), int(val)] for _, res, val in _rlimits(limits, groups)],
            "worker": worker}


def run_container_spec(files: AttemptFiles, *, image_id: str, name: str, ctl: Path, groups: Mapping[str, Path],
                       limits: Limits, cpus: int, max_concurrency: int, nproc: int, user: str,
                       labels: Mapping[str, str], cgroup_parent: str | None = None) -> dict[str, Any]:
    """(pure) The libpod create request of the run container: an attempt container's confinement,
    sized for `max_concurrency` attempts, whose first process is worker_sdk.nested. /proc is not
    masked (`unmask`): the kernel lets a sandbox mount a /proc of its own only where nothing covers
    parts of the container's; the container's user can read nothing there it could not read anyway.
    `cgroup_parent`: the run's cgroup, where the container, its conmon and so every attempt's
    process are counted as the run's workers."""
    lim = limits
    fsize = lim.max_file_mb * MIB
    slots = max(1, int(max_concurrency)) + 1

    def bind(src: Path, dest: str, ro: bool) -> dict[str, Any]:
        return {"destination": dest, "type": "bind", "source": str(src), "options": ["rbind", *(["ro"] if ro else [])]}
    mounts = [{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
               "options": ["rw", "nosuid", "nodev", "size=16m", "mode=1777"]},
              bind(ctl, IN_CTL, False), bind(files.base_git, f"{IN_RUN}/base.git", True),
              bind(files.coordinator_pub, f"{IN_RUN}/coordinator.pub", True),
              bind(files.gateway_socket, f"{IN_RUN}/gateway.sock", False),
              *([bind(files.egress_socket, f"{IN_RUN}/egress.sock", False)] if files.egress_socket else []),
              *[bind(g, f"{IN_CG}/{c}", False) for c, g in sorted(groups.items())]]
    return {
        "name": name, "image": image_id, "entrypoint": ["python3", "-s", "-m", "worker_sdk.nested"],
        "command": [IN_CTL], "labels": dict(labels), "remove": True,
        "netns": {"nsmode": "none"}, "pidns": {"nsmode": "private"}, "ipcns": {"nsmode": "private"},
        "utsns": {"nsmode": "private"}, "unmask": ["/proc/*"],
        "read_only_filesystem": True, "read_write_tmpfs": False,
        "cap_drop": ["ALL"], "no_new_privileges": True, "user": user,
        "resource_limits": {"pids": {"limit": slots * lim.max_processes + 64},
                            "memory": {"limit": slots * lim.memory_mb * MIB, "swap": slots * lim.memory_mb * MIB},
                            "cpu": {"quota": cpus * max(1, int(max_concurrency)) * 100000, "period": 100000}},
        "r_limits": [{"type": "nofile", "soft": lim.max_open_files, "hard": lim.max_open_files},
                     {"type": "nproc", "soft": nproc, "hard": nproc},
                     {"type": "fsize", "soft": fsize, "hard": fsize},
                     {"type": "core", "soft": 0, "hard": 0}],
        "mounts": mounts, "work_dir": "/tmp", "env": {"HOME": "/tmp"},
        **({"cgroup_parent": cgroup_parent} if cgroup_parent else {}),
    }


DIR_PREFIX = "dome-nested-"  # the run container's host directory: dome-nested-<coordinator pid>-<random>


def sweep_dirs(alive, base: Path | None = None) -> list[Path]:
    """Remove the run containers' host directories left by coordinators of this host that were
    killed outright (their containers are swept by label); returns what was removed."""
    out = []
    for d in Path(base or tempfile.gettempdir()).glob(f"{DIR_PREFIX}*-*"):
        pid = d.name[len(DIR_PREFIX):].split("-", 1)[0]
        if d.is_dir() and not d.is_symlink() and pid.isdigit() and not alive(int(pid)):
            shutil.rmtree(d, ignore_errors=True)
            out.append(d)
    return out


class NestedRefused(Exception):
    """The run container cannot build an attempt's sandbox here: the reason, for stderr."""


@dataclass
class _Shared:
    base_git: Path
    coordinator_pub: Path
    gateway_socket: Path
    egress_socket: Path | None


class RunContainer:
    """One image's run container: started, probed, and its lifeline held (start raises NestedRefused)."""

    def __init__(self, api: PodmanService, files: AttemptFiles, *, image_id: str, cgroup_parent: str, limits: Limits,
                 cpus: int, max_concurrency: int, nproc: int, rootless: bool, labels: Mapping[str, str],
                 start_timeout: float = 60.0) -> None:
        self.api = api
        self.limits = limits
        self.uid = 0 if rootless else CONTAINER_UID
        self.shared = _Shared(files.base_git, files.coordinator_pub, files.gateway_socket, files.egress_socket)
        self.dir = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-"))  # 0700: the coordinator's
        self.ctl = self.dir / "ctl"
        self.ctl.mkdir(mode=0o700)
        os.chown(self.ctl, self.uid, self.uid)  # the container's user makes its socket there, nobody else reaches it
        nonce = os.urandom(4).hex()
        self.groups = {c: CGROUP_FS / c / cgroup_parent.lstrip("/") / f"dome-attempts-{nonce}" for c in CONTROLLERS}
        for g in self.groups.values():
            g.mkdir(parents=True, exist_ok=True)
        self.name = f"dome-run-{os.getpid()}-{nonce}"
        self.life: socket.socket | None = None
        spec = run_container_spec(files, image_id=image_id, name=self.name, ctl=self.ctl, groups=self.groups,
                                  limits=limits, cpus=cpus, max_concurrency=max_concurrency, nproc=nproc,
                                  user="0:0" if rootless else f"{CONTAINER_UID}:{CONTAINER_UID}", labels=labels,
                                  cgroup_parent=cgroup_parent)
        try:
            api.create(spec)
            api.start(self.name)
            self.life = self._connect(start_timeout)
            said = self.life.recv(4096).decode("utf-8", "replace").strip()
        except (OSError, PodmanApiError) as exc:
            self.close()
            raise NestedRefused(f"the run container did not start: {exc}") from exc
        if said != "ready":
            self.close()
            raise NestedRefused(said or "the run container ended before its probe")

    def _connect(self, timeout: float) -> socket.socket:
        path = str(self.ctl / SOCKET_NAME)
        deadline = time.monotonic() + timeout
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                s.connect(path)
                s.settimeout(timeout)
                return s
            except OSError:
                s.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def fits(self, files: AttemptFiles) -> bool:
        """The attempt's shared files are the ones this container binds (else: a fresh container)."""
        return self.shared == _Shared(files.base_git, files.coordinator_pub, files.gateway_socket, files.egress_socket)

    def _attempt_groups(self, neid: str) -> dict[str, Path]:
        out = {}
        for c, parent in self.groups.items():
            g = parent / neid
            g.mkdir()
            out[c] = g
        (out["memory"] / "memory.limit_in_bytes").write_text(str(self.limits.memory_mb * MIB))
        try:  # no escape into swap where the host counts it
            (out["memory"] / "memory.memsw.limit_in_bytes").write_text(str(self.limits.memory_mb * MIB))
        except OSError:
            pass
        (out["pids"] / "pids.max").write_text(str(self.limits.max_processes))
        for g in out.values():  # the zygote's child (the container's user) joins them; nothing else it may write
            os.chown(g / "cgroup.procs", self.uid, self.uid)
        return out

    def open(self, neid: str, files: AttemptFiles, cpus: int,
             gateway_path: str = IN_SOCKET) -> tuple[socket.socket, dict[str, Path]]:
        """Start one attempt: its cgroups, its request and descriptors to the run container. The
        host's key file goes as soon as the descriptor is sent. Returns the attempt's connection
        (its status comes back there; closing it kills the attempt) and its cgroups."""
        groups = self._attempt_groups(neid)
        req = attempt_request(files, neid, self.limits, cpus, gateway_path)
        log = log_file(files)
        fds: list[int] = []
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            fds.append(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600))
            for p in (files.spawn_json, files.task_json, files.worker_key):
                if p is not None:
                    fds.append(os.open(p, os.O_RDONLY | os.O_CLOEXEC))
            conn.connect(str(self.ctl / SOCKET_NAME))
            conn.sendmsg([json.dumps(req).encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        except BaseException:
            conn.close()
            self.sweep(groups)
            raise
        finally:
            for fd in fds:
                os.close(fd)
            if files.worker_key is not None:
                files.worker_key.unlink(missing_ok=True)  # the run container holds it: it lives only there
        return conn, groups

    def finish(self, neid: str, files: AttemptFiles, conn: socket.socket, groups: dict[str, Path]) -> ExitInfo:
        """Wait for the attempt's status, then sweep its cgroups: what they counted, what is left."""
        conn.settimeout(None)
        try:
            said = conn.recv(64).decode("ascii", "replace").strip()
        except OSError:
            said = ""
        finally:
            conn.close()
        rc = int(said) if said.isdigit() else STATUS_KILLED
        violations = self.sweep(groups)
        tail = log_tail(log_file(files), 4096)
        if 128 < rc <= 128 + 64:
            return ExitInfo(neid, None, signal=rc - 128, stderr_tail=tail, violations=violations)
        return ExitInfo(neid, rc, stderr_tail=tail, violations=violations)

    def sweep(self, groups: Mapping[str, Path]) -> list[dict[str, Any]]:
        """Kill whatever of the attempt is left in its groups, read their counters, remove them."""
        for g in groups.values():
            _kill_members(g)
        mem, pids = groups.get("memory"), groups.get("pids")
        violations = counter_violations(refused_forks=refused_forks(pids) if pids else 0,
                                        oom_kills=oom_kills(mem, "v1") if mem else 0, before=None,
                                        max_processes=self.limits.max_processes, memory_mb=self.limits.memory_mb)
        for g in groups.values():
            _rmdir(g, wait_s=2.0)
        return violations

    def close(self) -> None:
        """End the container (its first process exits when the lifeline closes), remove it and the
        attempts' cgroups and the control directory."""
        if self.life is not None:
            self.life.close()
            self.life = None
        try:
            self.api.remove(self.name)
        except (OSError, PodmanApiError):
            pass
        for g in self.groups.values():
            for d in [x for x in g.iterdir() if x.is_dir()] if g.is_dir() else []:
                _kill_members(d)
                _rmdir(d, wait_s=2.0)
            _rmdir(g, wait_s=2.0)
        shutil.rmtree(self.dir, ignore_errors=True)
