"""ContainerExecutor: each attempt runs in an OCI container (podman) from a pinned image.

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
host file deleted as soon as the container has started (`podman run -d`
returns after the mounts are made), as the local executor does with bwrap.
Each attempt has a thread of its own that starts the container, waits for it (`podman wait`),
reads its exit status and logs (`podman logs`) and removes it, so podman's CLI never holds the
run loop; a container that could not start exits 125 with podman's message as its stderr.
"""
from __future__ import annotations

import json
import os
import re
import resource
import shutil
import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from registry.errors import DomeError

from .base import AttemptFiles, ExitInfo, Limits
from .sandbox import IN_BASE, IN_EGRESS, IN_PUB, IN_SCRATCH, IN_SOCKET, IN_SPAWN, IN_TASK, IN_WORKER_KEY, \
    cpus_per_worker

WORKER_USER = "10001:10001"
LABEL = "io.dome.attempt"
OWNER_LABEL = "io.dome.coordinator"  # "<host>:<pid>" of the coordinator that started the container
STDERR_TAIL = 4096
NPROC_RLIMIT = 16384  # the RLIMIT_NPROC backstop (capped at the host's hard limit); the pids cgroup is the limit
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


def container_argv(files: AttemptFiles, *, image_id: str, name: str, gateway_path: str, limits: Limits,
                   cpus: int, user: str = WORKER_USER, podman: str = "podman", runtime: str | None = None,
                   labels: Mapping[str, str] | None = None) -> list[str]:
    """The full `podman run -d` command line of one attempt (pure)."""
    lim = limits
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nproc = NPROC_RLIMIT if hard == resource.RLIM_INFINITY else min(hard, NPROC_RLIMIT)
    # the container sees its own cgroups at /sys/fs/cgroup (read-only): the runtime reads its
    # limit counters there, as it reads /dome/cgroup under bubblewrap
    budget = {"tmp_mb": lim.tmp_mb, "disk_mb": lim.disk_mb, "memory_mb": lim.memory_mb,
              "max_processes": lim.max_processes, "cgroups": ["memory", "pids"], "cgroup_root": "/sys/fs/cgroup"}
    a = [podman, *(["--runtime", runtime] if runtime else []), "run", "--detach", "--name", name,
         *[x for k, v in sorted((labels or {}).items()) for x in ("--label", f"{k}={v}")],
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
         "-e", "HOME=/tmp", "-e", f"DOME_SCRATCH={IN_SCRATCH}", "-e", f"DOME_BASE_GIT={IN_BASE}",
         "-e", f"DOME_COORDINATOR_PUB={IN_PUB}", "-e", f"DOME_LIMITS={json.dumps(budget)}",
         "-e", f"DOME_WORKER_CPUS={cpus}",
         *(["-e", f"DOME_TASK_META={IN_TASK}"] if files.task_json else []),
         *(["-e", f"DOME_WORKER_KEY={IN_WORKER_KEY}"] if files.worker_key else []),
         *(["-e", f"DOME_EGRESS_SOCKET={IN_EGRESS}"] if files.egress_socket else []),
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
    detached containers outlive it, though their grants die with the run's lease."""
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


@dataclass
class _Attempt:
    name: str
    files: AttemptFiles
    thread: threading.Thread | None = None
    killed: str | None = None
    result: ExitInfo | None = None


class ContainerExecutor:
    name = "container"

    def __init__(self, *, image: str | None = None, sandbox: str = "bwrap", max_concurrency: int = 4,
                 limits: Limits | None = None, podman: str | None = None, runtime: str | None = None) -> None:
        exe = podman or shutil.which("podman")
        if exe is None:
            raise ContainerUnavailable("podman is not installed", hints=ContainerUnavailable.hints_default)
        image = image or os.environ.get("DOME_WORKER_IMAGE")
        if not image:
            raise ContainerUnavailable("no worker image given (--image or $DOME_WORKER_IMAGE)",
                                       hints=["ops/container/build.sh prints the pinned ref to pass"])
        self.podman = exe
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

    def resolve(self, container_ref: str) -> str:
        """The image id to run for a SpawnSpec's container_ref, or a typed refusal (nothing started)."""
        ref = parse_ref(container_ref)
        return check_image(ref, inspect_image(self.podman, ref.name), inspect_image(self.podman, ref.digest))

    def dispatch(self, spec: Mapping[str, Any], files: AttemptFiles) -> None:
        """Check the image (a typed refusal raises here, before anything starts), then start and
        supervise the container on a thread of its own, so podman's CLI never holds the run loop."""
        neid = str(spec["node_execution_id"])
        image_id = self.resolve(str(spec["container_ref"]))
        files.log_dir.mkdir(parents=True, exist_ok=True)
        user = "0:0" if self.rootless else WORKER_USER  # rootless: container root is the invoking user
        if files.worker_key is not None and not self.rootless:
            os.chown(files.worker_key, 10001, 10001)  # readable by the container's user only (0600)
        gw = (spec.get("gateway") or {}).get("socket") or IN_SOCKET
        att = _Attempt(f"dome-{neid}", files)
        argv = container_argv(files, image_id=image_id, name=att.name, gateway_path=gw, limits=self.limits,
                              cpus=cpus_per_worker(self.max_concurrency), user=user, podman=self.podman,
                              runtime=self.runtime, labels={LABEL: neid, "io.dome.run": str(spec["run_id"]),
                                                            OWNER_LABEL: self.owner})
        att.thread = threading.Thread(target=self._supervise, args=(neid, att, argv), name=f"dome-{neid}",
                                      daemon=True)
        with self._lock:
            self._attempts[neid] = att
        att.thread.start()

    def _supervise(self, neid: str, att: _Attempt, argv: list[str]) -> None:
        try:
            att.result = self._lifecycle(neid, att, argv)
        except Exception as exc:  # noqa: BLE001 - reported as the attempt's exit, never lost
            att.result = ExitInfo(neid, 125, stderr_tail=f"container executor: {type(exc).__name__}: {exc}")
        finally:
            _podman(self.podman, None, "rm", "-f", att.name)

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
            _podman(self.podman, None, "kill", "--signal", "KILL", att.name, timeout=60)
        subprocess.run([self.podman, "wait", att.name], capture_output=True, text=True)
        r = _podman(self.podman, None, "inspect", "--format", "{{.State.ExitCode}} {{.State.OOMKilled}}", att.name)
        code_s, _, oom = r.stdout.strip().partition(" ")
        try:
            rc = int(code_s)
        except ValueError:
            rc = 137
        with open(att.files.log_dir / "worker.stdout", "wb") as so, open(att.files.log_dir / "worker.stderr", "wb") as se:
            subprocess.run([self.podman, "logs", att.name], stdout=so, stderr=se, timeout=60)
        violations = [{"kind": "memory_limit", "limit_mb": self.limits.memory_mb}] if oom == "true" else []
        try:
            tail = (att.files.log_dir / "worker.stderr").read_bytes()[-STDERR_TAIL:].decode("utf-8", "replace")
        except OSError:
            tail = ""
        if 128 < rc <= 128 + 64:  # killed by a signal (podman reports 128+n)
            return ExitInfo(neid, None, signal=rc - 128, stderr_tail=tail, violations=violations)
        return ExitInfo(neid, rc, stderr_tail=tail, violations=violations)

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
            _podman(self.podman, None, "kill", "--signal", "KILL", att.name, timeout=60)

    def shutdown(self) -> None:
        for neid in self.running():
            self.kill(neid, "shutdown")
        with self._lock:
            atts = list(self._attempts.values())
        for a in atts:
            if a.thread is not None:
                a.thread.join(60)
        self.poll()
