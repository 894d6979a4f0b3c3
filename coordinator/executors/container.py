"""ContainerExecutor: each attempt runs in an OCI container (podman) from a pinned image.

Two modes (`DOME_CONTAINER_MODE`, or the `mode` argument). By default ("nested") the attempts
of one image share a run container that is started once for the run, and each attempt runs in
a fresh bubblewrap sandbox of its own inside it, entered by a pre-imported runtime there
(coordinator/executors/nested.py says what the sandbox and the run container hold and how an
attempt is killed and swept): a container costs podman and runc about 80 ms of machine CPU
before the worker starts (docs/benchmarks.md). "fresh" starts a container per attempt, as described
below; the nested mode falls back to it, saying why on stderr, where the image has no
bubblewrap, the container refuses user namespaces, podman's API service is not running or no
per-attempt cgroups can be made. The image check, the confinement of the container itself, the
orphan sweep and the CPU accounting below hold for both.

The image is named by digest in the SpawnSpec's `container_ref`
(`NAME@sha256:<hex>`, the image id podman reports, or one of its manifest
digests). Before anything starts, the executor resolves NAME in the local
image store and refuses the attempt with CONTAINER_IMAGE_MISMATCH when NAME
now points at another image than the digest pinned, and with
CONTAINER_IMAGE_UNAVAILABLE when no local image has that digest. The
container is then started from the image id itself, so what runs is exactly
what the SpawnSpec names.

Confinement matches the bubblewrap sandbox (coordinator/executors/sandbox.py):

- no network (`--network none`); the gateway socket (and the egress socket
  of an agent run) bind-mounted at the path the SpawnSpec names is the
  only way out;
- a read-only root file system; /tmp and /dome/scratch are size-capped
  tmpfs mounts (`tmp_mb`, `disk_mb`); base.git, spawn.json, task.json and
  coordinator.pub are bound read-only; nothing of OPS_ROOT, the repository
  or the host's home directories is mounted;
- an unprivileged user (uid 10001; the invoking user under rootless
  podman), every capability dropped, no-new-privileges;
- limits: pids, memory (swap included), CPUs, and rlimits for CPU seconds,
  open files, file size and core dumps.

The attempt's private key is bound read-only into its container and the
host file deleted as soon as the container has started (the start returns
after the mounts are made), as the local executor does with bwrap.
Each attempt has a thread of its own that creates and starts the container, waits for it,
reads its exit status and logs and removes it, so podman never holds the run loop; a
container that could not start exits 125 with podman's message as its stderr. The steps go
to one podman API service per run (coordinator/executors/podman_api.py); where it cannot
start, or with DOME_PODMAN_API=0, to podman's commands (`run -d`, `wait`, `inspect`, `logs`,
`rm`). On cgroup v1 as root (podman's cgroupfs manager) the run's containers and their conmon
processes run under one cgroup nested in the coordinator's own, whose CPU is the run's workers'.
"""
from __future__ import annotations

import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from registry.errors import DomeError

from .base import AttemptFiles, ExitInfo, Limits
from .local import CpuTally
from .nested import NestedRefused, RunContainer, container_mode, sweep_dirs
from .podman_api import PodmanApiError, PodmanService, container_spec
from .sandbox import CGROUP_FS, IN_BASE, IN_EGRESS, IN_PUB, IN_SCRATCH, IN_SOCKET, IN_SPAWN, IN_TASK, IN_WORKER_KEY, \
    _own_cgroup, cgroup_cpu_ns, cpus_per_worker
from .zygote import live_cpu_s

WORKER_USER = "10001:10001"
LABEL = "io.dome.attempt"
OWNER_LABEL = "io.dome.coordinator"  # "<host>:<pid>" of the coordinator that started the container
STDERR_TAIL = 4096
NPROC_RLIMIT = 16384  # the RLIMIT_NPROC backstop (capped at the host's hard limit); the pids cgroup is the limit
API_ENV = "DOME_PODMAN_API"  # "0": podman's command line for every step, as before the API service
REF = re.compile(r"^(?P<name>[^@\s]+)@sha256:(?P<hex>[0-9a-f]{64})$")


class ContainerUnavailable(DomeError):
    code = "CONTAINER_UNAVAILABLE"
    hints_default = ["install podman (apt-get install podman) and build the worker image: ops/container/build.sh"]


class ContainerImageMismatch(DomeError):
    code = "CONTAINER_IMAGE_MISMATCH"


class ContainerImageUnavailable(DomeError):
    code = "CONTAINER_IMAGE_UNAVAILABLE"
    hints_default = ["build it with ops/container/build.sh, or pull it by digest (podman pull NAME@sha256:...)"]


@dataclass(frozen=True)
class ImageRef:
    name: str
    digest: str  # "sha256:<hex>"


def parse_ref(ref: str) -> ImageRef:
    """`NAME@sha256:<64 hex>`; anything else is refused (an unpinned or host ref)."""
    m = REF.match(str(ref))
    if m is None:
        raise ContainerImageMismatch("container_ref does not pin an image by sha256 digest",
                                     details={"container_ref": ref})
    return ImageRef(m.group("name"), "sha256:" + m.group("hex"))


def image_digests(info: Mapping[str, Any]) -> set[str]:
    """Every digest that names this image: its id (the config digest) and its manifest digests."""
    out = {"sha256:" + str(info.get("Id", "")).removeprefix("sha256:")}
    if info.get("Digest"):
        out.add(str(info["Digest"]))
    for rd in info.get("RepoDigests") or []:
        out.add(str(rd).rsplit("@", 1)[-1])
    return out


def check_image(ref: ImageRef, by_name: Mapping[str, Any] | None, by_digest: Mapping[str, Any] | None) -> str:
    """Pure decision: the image id to run for `ref`, or a typed refusal.

    `by_name` is what the local store holds under ref.name (None: nothing),
    `by_digest` what it holds under the pinned digest."""
    if by_digest is None:
        raise ContainerImageUnavailable("no local image has the digest the SpawnSpec pins",
                                        details={"name": ref.name, "digest": ref.digest},
                                        hints=ContainerImageUnavailable.hints_default)
    if by_name is not None and ref.digest not in image_digests(by_name):
        raise ContainerImageMismatch(
            f"{ref.name} is now another image than the digest the SpawnSpec pins",
            details={"name": ref.name, "pinned": ref.digest, "actual": "sha256:" + str(by_name.get("Id"))},
            hints=["rebuild the run's queue with the current digest, or run the pinned image"])
    return str(by_digest["Id"])


def nproc_backstop() -> int:
    """RLIMIT_NPROC of an attempt: NPROC_RLIMIT, capped at the host's hard limit."""
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    return NPROC_RLIMIT if hard == resource.RLIM_INFINITY else min(hard, NPROC_RLIMIT)


def attempt_env(files: AttemptFiles, limits: Limits, cpus: int) -> dict[str, str]:
    """The environment an attempt's runtime reads (pure), beside the image's own."""
    lim = limits
    # the container sees its own cgroups at /sys/fs/cgroup (read-only): the runtime reads its
    # limit counters there, as it reads /dome/cgroup under bubblewrap
    budget = {"tmp_mb": lim.tmp_mb, "disk_mb": lim.disk_mb, "memory_mb": lim.memory_mb,
              "max_processes": lim.max_processes, "cgroups": ["memory", "pids"], "cgroup_root": "/sys/fs/cgroup"}
    return {"HOME": "/tmp", "DOME_SCRATCH": IN_SCRATCH, "DOME_BASE_GIT": IN_BASE, "DOME_COORDINATOR_PUB": IN_PUB,
            "DOME_LIMITS": json.dumps(budget), "DOME_WORKER_CPUS": str(cpus),
            **({"DOME_TASK_META": IN_TASK} if files.task_json else {}),
            **({"DOME_WORKER_KEY": IN_WORKER_KEY} if files.worker_key else {}),
            **({"DOME_EGRESS_SOCKET": IN_EGRESS} if files.egress_socket else {})}


def container_argv(files: AttemptFiles, *, image_id: str, name: str, gateway_path: str, limits: Limits,
                   cpus: int, user: str = WORKER_USER, podman: str = "podman", runtime: str | None = None,
                   labels: Mapping[str, str] | None = None, cgroup_parent: str | None = None) -> list[str]:
    """The full `podman run -d` command line of one attempt (pure): the path without podman's API."""
    lim = limits
    nproc = nproc_backstop()
    a = [podman, *(["--runtime", runtime] if runtime else []), "run", "--detach", "--name", name,
         *[x for k, v in sorted((labels or {}).items()) for x in ("--label", f"{k}={v}")],
         *(["--cgroup-parent", cgroup_parent] if cgroup_parent else []),
         "--network", "none", "--read-only", "--read-only-tmpfs=false",
         "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--user", user,
         "--pids-limit", str(lim.max_processes),
         "--memory", f"{lim.memory_mb}m", "--memory-swap", f"{lim.memory_mb}m", "--cpus", str(cpus),
         "--ulimit", f"cpu={lim.cpu_seconds}:{lim.cpu_seconds}",
         "--ulimit", f"nofile={lim.max_open_files}:{lim.max_open_files}",
         # processes: the pids cgroup (--pids-limit) bounds the container; RLIMIT_NPROC counts every process
         # of the uid on the host, so it is only a generous backstop (an attempt's own limit would be hit by
         # the uid's other containers, and fork failures there leave no trace in the cgroup's counters)
         "--ulimit", f"nproc={nproc}:{nproc}",
         "--ulimit", f"fsize={lim.max_file_mb * 1024 * 1024}:{lim.max_file_mb * 1024 * 1024}",
         "--ulimit", "core=0:0",
         "--tmpfs", f"/tmp:rw,nosuid,nodev,size={lim.tmp_mb}m,mode=1777",
         "--tmpfs", f"{IN_SCRATCH}:rw,nosuid,nodev,size={lim.disk_mb}m,mode=1777",
         "-v", f"{files.base_git}:{IN_BASE}:ro",
         "-v", f"{files.spawn_json}:{IN_SPAWN}:ro",
         "-v", f"{files.coordinator_pub}:{IN_PUB}:ro",
         "-v", f"{files.gateway_socket}:{gateway_path}",
         *(["-v", f"{files.egress_socket}:{IN_EGRESS}"] if files.egress_socket else []),
         *(["-v", f"{files.task_json}:{IN_TASK}:ro"] if files.task_json else []),
         *(["-v", f"{files.worker_key}:{IN_WORKER_KEY}:ro"] if files.worker_key else []),
         "--workdir", IN_SCRATCH,
         *[x for k, v in attempt_env(files, lim, cpus).items() for x in ("-e", f"{k}={v}")],
         image_id, IN_SPAWN]
    return a


def _podman(podman: str, runtime: str | None, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([podman, *(["--runtime", runtime] if runtime else []), *args],
                          capture_output=True, text=True, timeout=timeout)


def inspect_image(podman: str, ref: str) -> dict[str, Any] | None:
    r = subprocess.run([podman, "image", "inspect", ref], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        return None
    data = json.loads(r.stdout or "[]")
    return data[0] if data else None


def probe_runtime(podman: str, image_id: str, preferred: str | None = None) -> str | None:
    """The OCI runtime that can start a limited container here: `preferred`, podman's
    default, else runc (crun refuses hosts whose cgroups are in hybrid v1/v2 mode)."""
    candidates = [preferred] if preferred else [None, *(["runc"] if shutil.which("runc") else [])]
    errors = []
    for rt in candidates:
        r = _podman(podman, rt, "run", "--rm", "--network", "none", "--pids-limit", "64", "--memory", "256m",
                    "--ulimit", "nofile=256:256", "--ulimit", "nproc=64:64", "--entrypoint", "true", image_id)
        if r.returncode == 0:
            return rt
        errors.append(f"{rt or 'default'}: {r.stderr.strip()[-300:]}")
    raise ContainerUnavailable("podman cannot start a confined container here", details={"tried": errors},
                               hints=["set DOME_OCI_RUNTIME, or install runc (apt-get install runc)"])


def orphans(containers: list[dict[str, Any]], host: str, alive) -> list[str]:
    """Pure: names of dome attempt containers whose coordinator (on this host) no longer runs."""
    out = []
    for c in containers:
        labels = c.get("Labels") or {}
        owner = str(labels.get(OWNER_LABEL, ""))
        h, _, pid = owner.rpartition(":")
        if LABEL in labels and h == host and pid.isdigit() and not alive(int(pid)):
            out.append(str((c.get("Names") or [c.get("Id")])[0]))
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_orphans(podman: str) -> list[str]:
    """Remove attempt containers left by a coordinator of this host that was killed (kill -9):
    detached containers outlive it, though their grants die with the run's lease (and the host
    directories of its run containers, and its run's cgroups)."""
    sweep_dirs(_alive)
    if os.geteuid() == 0:
        sweep_run_cgroups(_alive)
    r = subprocess.run([podman, "ps", "-a", "--filter", f"label={LABEL}", "--format", "json"],
                       capture_output=True, text=True, timeout=60)
    try:
        found = json.loads(r.stdout or "[]") if r.returncode == 0 else []
    except json.JSONDecodeError:
        return []
    names = orphans(found, socket.gethostname(), _alive)
    if names:
        subprocess.run([podman, "rm", "-f", *names], capture_output=True, timeout=120)
    return names


def run_cgroup_parent(pid: int, nonce: str) -> str | None:
    """cgroup v1 as root: the cgroup path (the same in every hierarchy) to start the run's
    containers and their conmon processes under, nested in this process's own cpuacct group so
    that whatever counts the coordinator (a benchmark's group, the host's) counts them too; None
    elsewhere (cgroup v2, rootless: podman's own placement, and the workers go unmeasured)."""
    own = _own_cgroup("cpuacct")
    if os.geteuid() != 0 or own is None or not (CGROUP_FS / "cpuacct" / "cpuacct.usage").exists():
        return None
    return f"{own.rstrip('/')}/dome-containers-{pid}-{nonce}"


def remove_cgroup_tree(rel: str, fs: Path = CGROUP_FS, *, wait_s: float = 0.0) -> None:
    """Remove `rel` and the groups below it in every v1 hierarchy podman made it in (deepest
    first; a group still holding a process stays). `wait_s`: try again for that long while one
    stays (a container just removed may still have processes on their way out)."""
    deadline = time.monotonic() + wait_s
    while not _remove_cgroup_tree_once(rel, fs) and time.monotonic() < deadline:
        time.sleep(0.05)


def _remove_cgroup_tree_once(rel: str, fs: Path) -> bool:
    """One pass of `remove_cgroup_tree`; whether every hierarchy is rid of `rel`."""
    for top in fs.iterdir():
        base = top / rel.lstrip("/")
        if not base.is_dir() or base.is_symlink():
            continue
        for d in sorted((x for x in base.rglob("*") if x.is_dir()), key=lambda x: -len(x.parts)):
            try:
                d.rmdir()
            except OSError:
                pass
        try:
            base.rmdir()
        except OSError:
            pass
    return not any((top / rel.lstrip("/")).is_dir() for top in fs.iterdir())


def sweep_run_cgroups(alive, fs: Path = CGROUP_FS) -> list[str]:
    """Remove the run cgroups (`run_cgroup_parent`) that coordinators of this host killed outright
    left beside this process's own (their conmon's and their attempts' groups, empty by then)."""
    own = _own_cgroup("cpuacct")
    if own is None:
        return []
    names = {d.name for top in fs.iterdir() if top.is_dir() and not top.is_symlink()
             for d in (top / own.lstrip("/")).glob("dome-containers-*-*") if d.is_dir()}
    out = []
    for name in sorted(names):  # the same path in every hierarchy (podman makes it in each)
        pid = name.split("-")[2]
        if pid.isdigit() and not alive(int(pid)):
            rel = f"{own.rstrip('/')}/{name}"
            remove_cgroup_tree(rel, fs)
            out.append(rel)
    return out


def _release(api: PodmanService | None, cgroup_parent: str | None,
             runs: dict[str, RunContainer | None] | None = None) -> None:
    for run in list((runs or {}).values()):
        if run is not None:
            run.close()
    (runs or {}).clear()
    if api is not None:
        api.close()
    if cgroup_parent is not None:
        remove_cgroup_tree(cgroup_parent, wait_s=5.0)


@dataclass
class _Attempt:
    name: str
    files: AttemptFiles
    thread: threading.Thread | None = None
    killed: str | None = None
    result: ExitInfo | None = None
    run: RunContainer | None = None  # nested mode: the run container it runs in
    conn: socket.socket | None = None  # nested mode: its connection there (closed: the attempt is killed)


class ContainerExecutor:
    name = "container"

    def __init__(self, *, image: str | None = None, sandbox: str = "bwrap", max_concurrency: int = 4,
                 limits: Limits | None = None, podman: str | None = None, runtime: str | None = None,
                 api: bool | None = None, mode: str | None = None) -> None:
        exe = podman or shutil.which("podman")
        if exe is None:
            raise ContainerUnavailable("podman is not installed", hints=ContainerUnavailable.hints_default)
        image = image or os.environ.get("DOME_WORKER_IMAGE")
        if not image:
            raise ContainerUnavailable("no worker image given (--image or $DOME_WORKER_IMAGE)",
                                       hints=["ops/container/build.sh prints the pinned ref to pass"])
        self.podman = exe
        self.api: PodmanService | None = None
        name = image.split("@", 1)[0]
        if "@" in image:  # pinned: it must still be what the name points at
            image_id = check_image(parse_ref(image), inspect_image(exe, name), inspect_image(exe, image.split("@", 1)[1]))
        else:
            info = inspect_image(exe, name)
            if info is None:
                raise ContainerImageUnavailable(f"no local image named {name}", details={"name": name},
                                                hints=ContainerImageUnavailable.hints_default)
            image_id = str(info["Id"])
        self.container_ref = f"{name}@sha256:{image_id.removeprefix('sha256:')}"
        self.runtime = probe_runtime(exe, image_id, runtime or os.environ.get("DOME_OCI_RUNTIME") or None)
        self.sandbox = sandbox  # the host-side sandbox of validation suites; workers run in containers
        self.max_concurrency = max_concurrency
        self.limits = limits or Limits()
        self.rootless = os.geteuid() != 0
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        sweep_orphans(exe)
        self._attempts: dict[str, _Attempt] = {}
        self._lock = threading.Lock()
        self.mode = container_mode(mode)
        self._runs: dict[str, RunContainer | None] = {}  # nested mode: image id -> its run container (None: refused)
        self._cgroup_ns = 0
        # podman's API: one service for the run instead of a podman command per step; the
        # command line stays the way where the service cannot start, or with DOME_PODMAN_API=0
        use_api = api if api is not None else os.environ.get(API_ENV, "1").strip() != "0"
        self.api_error: str | None = None
        if use_api:
            try:
                self.api = PodmanService(exe, self.runtime)
            except OSError as exc:
                self.api_error = str(exc)
        # every container of the run (and its conmon) under one cgroup of the coordinator's own:
        # counted wherever the coordinator is, and read back as the workers' CPU (a cgroup path
        # as the parent is cgroupfs's spelling; systemd's is a slice)
        self.cgroup_parent = run_cgroup_parent(os.getpid(), os.urandom(4).hex()) \
            if self._cgroup_manager() == "cgroupfs" else None
        if self.cgroup_parent is not None:  # the workers' CPU: the containers, their conmon, the live service
            self.cpu = CpuTally(helper=self._workers_cpu_s)
        # the service and the run's cgroup go at shutdown, or when the executor is collected or the
        # process exits without one (an executor made only to check images)
        self._release = weakref.finalize(self, _release, self.api, self.cgroup_parent, self._runs)

    def _cgroup_manager(self) -> str:
        """podman's cgroup manager here ("cgroupfs", "systemd"), "" where it cannot be read."""
        try:
            if self.api is not None:
                return str(((self.api.request("GET", "/info", timeout=60) or {}).get("host") or {})
                           .get("cgroupManager", ""))
            return _podman(self.podman, None, "info", "--format", "{{.Host.CgroupManager}}", timeout=60).stdout.strip()
        except (OSError, PodmanApiError, subprocess.SubprocessError, AttributeError):
            return ""

    def _workers_cpu_s(self) -> float:
        return self._containers_cpu_s() + (live_cpu_s(self.api.proc.pid) if self.api is not None else 0.0)

    def _containers_cpu_s(self) -> float:
        """CPU (s) of every container of the run and of their conmon processes so far."""
        if self.cgroup_parent is not None:
            ns = cgroup_cpu_ns(CGROUP_FS / "cpuacct" / self.cgroup_parent.lstrip("/"))
            if ns is not None:
                self._cgroup_ns = ns  # kept: the group is removed at shutdown
        return self._cgroup_ns / 1e9

    def _inspect(self, ref: str) -> dict[str, Any] | None:
        return self.api.image(ref) if self.api is not None else inspect_image(self.podman, ref)

    def resolve(self, container_ref: str) -> str:
        """The image id to run for a SpawnSpec's container_ref, or a typed refusal (nothing started)."""
        ref = parse_ref(container_ref)
        by_name = self._inspect(ref.name)
        # the name's image has the pinned digest: it is the digest's image, no second look-up
        by_digest = by_name if by_name is not None and ref.digest in image_digests(by_name) else \
            self._inspect(ref.digest)
        return check_image(ref, by_name, by_digest)

    def dispatch(self, spec: Mapping[str, Any], files: AttemptFiles) -> None:
        """Check the image (a typed refusal raises here, before anything starts), then start and
        supervise the container on a thread of its own, so podman never holds the run loop."""
        neid = str(spec["node_execution_id"])
        image_id = self.resolve(str(spec["container_ref"]))
        files.log_dir.mkdir(parents=True, exist_ok=True)
        user = "0:0" if self.rootless else WORKER_USER  # rootless: container root is the invoking user
        if files.worker_key is not None and not self.rootless:
            os.chown(files.worker_key, 10001, 10001)  # readable by the container's user only (0600)
        gw = (spec.get("gateway") or {}).get("socket") or IN_SOCKET
        att = _Attempt(f"dome-{neid}", files)
        labels = {LABEL: neid, "io.dome.run": str(spec["run_id"]), OWNER_LABEL: self.owner}
        cpus = cpus_per_worker(self.max_concurrency)
        run = self._run_container(image_id, files, labels, cpus)
        if run is not None:
            att.run = run
            att.thread = threading.Thread(target=self._supervise_nested, args=(neid, att, cpus, gw), name=f"dome-{neid}",
                                          daemon=True)
            with self._lock:
                self._attempts[neid] = att
            att.thread.start()
            return
        if self.api is not None:
            how: Any = container_spec(files, image_id=image_id, name=att.name, gateway_path=gw, limits=self.limits,
                                      cpus=cpus, env=attempt_env(files, self.limits, cpus), nproc=nproc_backstop(),
                                      user=user, labels=labels, cgroup_parent=self.cgroup_parent)
        else:
            how = container_argv(files, image_id=image_id, name=att.name, gateway_path=gw, limits=self.limits,
                                 cpus=cpus, user=user, podman=self.podman, runtime=self.runtime, labels=labels,
                                 cgroup_parent=self.cgroup_parent)
        att.thread = threading.Thread(target=self._supervise, args=(neid, att, how), name=f"dome-{neid}",
                                      daemon=True)
        with self._lock:
            self._attempts[neid] = att
        att.thread.start()

    def _run_container(self, image_id: str, files: AttemptFiles, labels: Mapping[str, str],
                       cpus: int) -> RunContainer | None:
        """Nested mode: the image's run container (started with its first attempt), or None: a
        fresh container for this attempt (fresh mode; a refusal, said once on stderr; an attempt
        whose shared files are not the ones the run container binds)."""
        if self.mode != "nested":
            return None
        with self._lock:
            if image_id not in self._runs:
                why = "podman's API service is not running" if self.api is None else \
                    "no per-attempt cgroups here (cgroup v1 as root is needed)" if self.cgroup_parent is None else None
                run = None
                if why is None:
                    try:
                        run = RunContainer(self.api, files, image_id=image_id, cgroup_parent=self.cgroup_parent,
                                           limits=self.limits, cpus=cpus, max_concurrency=self.max_concurrency,
                                           nproc=nproc_backstop(), rootless=self.rootless,
                                           labels={**labels, LABEL: "run"})
                    except (NestedRefused, OSError) as exc:
                        why = str(exc)
                if why is not None:
                    print(f"dome: container executor: a fresh container per attempt ({why})", file=sys.stderr)
                self._runs[image_id] = run
            run = self._runs[image_id]
        return run if run is not None and run.fits(files) else None

    def _supervise_nested(self, neid: str, att: _Attempt, cpus: int, gateway_path: str) -> None:
        run = att.run
        assert run is not None
        try:
            try:
                att.conn, groups = run.open(neid, att.files, cpus, gateway_path)
            except OSError as exc:
                att.result = ExitInfo(neid, 125, stderr_tail=f"the run container could not start the attempt: {exc}")
                return
            if att.killed:  # killed while it was starting
                att.conn.shutdown(socket.SHUT_RDWR)
            att.result = run.finish(neid, att.files, att.conn, groups)
        except Exception as exc:  # noqa: BLE001 - reported as the attempt's exit, never lost
            att.result = ExitInfo(neid, 125, stderr_tail=f"container executor: {type(exc).__name__}: {exc}")
        finally:
            if self.cgroup_parent is not None:
                self.cpu.add_group(0)

    def _supervise(self, neid: str, att: _Attempt, how: Any) -> None:
        try:
            att.result = self._lifecycle_api(neid, att, how) if self.api is not None else \
                self._lifecycle(neid, att, how)
        except Exception as exc:  # noqa: BLE001 - reported as the attempt's exit, never lost
            att.result = ExitInfo(neid, 125, stderr_tail=f"container executor: {type(exc).__name__}: {exc}")
        finally:
            self._remove(att.name)
            if self.cgroup_parent is not None:
                self.cpu.add_group(0)  # one more attempt counted: its CPU is in the run's group

    def _remove(self, name: str) -> None:
        if self.api is not None:
            try:
                self.api.remove(name)
                return
            except (OSError, PodmanApiError):
                pass  # the service is gone: the command line still removes it
        _podman(self.podman, None, "rm", "-f", name)

    def _kill(self, name: str) -> None:
        if self.api is not None:
            try:
                self.api.kill(name)
                return
            except (OSError, PodmanApiError):
                pass
        _podman(self.podman, None, "kill", "--signal", "KILL", name, timeout=60)

    def _lifecycle_api(self, neid: str, att: _Attempt, spec: Mapping[str, Any]) -> ExitInfo:
        """create and start over the API, drop the host's key, wait, read the exit and the logs."""
        api = self.api
        assert api is not None
        try:
            api.create(spec)
            api.start(att.name)  # answers once the container runs: its mounts are made
        except PodmanApiError as exc:
            return ExitInfo(neid, 125, stderr_tail=f"podman could not start the attempt: {str(exc)[-2000:]}")
        finally:
            if att.files.worker_key is not None:
                att.files.worker_key.unlink(missing_ok=True)  # the container holds its bind: the key lives only there
        if att.killed:  # killed while it was starting
            self._kill(att.name)
        api.wait(att.name)
        rc, oom = api.state(att.name)
        out, err = api.logs(att.name)
        (att.files.log_dir / "worker.stdout").write_bytes(out)
        (att.files.log_dir / "worker.stderr").write_bytes(err)
        return self._exit(neid, 137 if rc is None else rc, oom, err[-STDERR_TAIL:].decode("utf-8", "replace"))

    def _exit(self, neid: str, rc: int, oom: bool, tail: str) -> ExitInfo:
        violations = [{"kind": "memory_limit", "limit_mb": self.limits.memory_mb}] if oom else []
        if 128 < rc <= 128 + 64:  # killed by a signal (podman reports 128+n)
            return ExitInfo(neid, None, signal=rc - 128, stderr_tail=tail, violations=violations)
        return ExitInfo(neid, rc, stderr_tail=tail, violations=violations)

    def _lifecycle(self, neid: str, att: _Attempt, argv: list[str]) -> ExitInfo:
        """run -d, drop the host's key, wait, read the exit and the logs."""
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        finally:
            if att.files.worker_key is not None:
                att.files.worker_key.unlink(missing_ok=True)  # the container holds its bind: the key lives only there
        if r.returncode != 0:
            return ExitInfo(neid, 125, stderr_tail=f"podman could not start the attempt: {r.stderr.strip()[-2000:]}")
        if att.killed:  # killed while it was starting
            self._kill(att.name)
        subprocess.run([self.podman, "wait", att.name], capture_output=True, text=True)
        r = _podman(self.podman, None, "inspect", "--format", "{{.State.ExitCode}} {{.State.OOMKilled}}", att.name)
        code_s, _, oom = r.stdout.strip().partition(" ")
        try:
            rc = int(code_s)
        except ValueError:
            rc = 137
        with open(att.files.log_dir / "worker.stdout", "wb") as so, open(att.files.log_dir / "worker.stderr", "wb") as se:
            subprocess.run([self.podman, "logs", att.name], stdout=so, stderr=se, timeout=60)
        try:
            tail = (att.files.log_dir / "worker.stderr").read_bytes()[-STDERR_TAIL:].decode("utf-8", "replace")
        except OSError:
            tail = ""
        return self._exit(neid, rc, oom == "true", tail)

    def running(self) -> list[str]:
        with self._lock:
            return sorted(self._attempts)

    def poll(self) -> list[ExitInfo]:
        with self._lock:
            done = [(n, a) for n, a in self._attempts.items() if a.thread is not None and not a.thread.is_alive()]
            for n, _ in done:
                del self._attempts[n]
        return [a.result or ExitInfo(n, 125, stderr_tail="container executor: no result") for n, a in done]

    def kill(self, node_execution_id: str, reason: str) -> None:
        with self._lock:
            att = self._attempts.get(node_execution_id)
        if att is not None:
            att.killed = reason
            if att.run is not None:
                if att.conn is not None:  # the handler sees its end close and kills the sandbox
                    try:
                        att.conn.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                return
            self._kill(att.name)

    def shutdown(self) -> None:
        for neid in self.running():
            self.kill(neid, "shutdown")
        with self._lock:
            atts = list(self._attempts.values())
        for a in atts:
            if a.thread is not None:
                a.thread.join(60)
        self.poll()
        self._containers_cpu_s()  # the last reading, before the group goes
        self._release()
