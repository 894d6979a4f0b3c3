"""Podman's REST API, served once per run: the container executor's way to podman without a
podman command per step.

Each `podman` command is a Go program that starts, reads its configuration and opens the
container store before it does anything: 20-35 ms of CPU here even for `podman --version`, and
an attempt took seven of them (two image inspections, run, wait, inspect, logs, rm). A
`podman system service` started by the executor does the same steps as requests on a unix
socket for a few milliseconds each.

The service is a child of the coordinator, so its CPU is the run's (any cgroup that counts the
coordinator counts it), and it dies with the coordinator (a parent-death signal) and at the
executor's shutdown. Its socket lives in a private (0700) directory of its own that no
container mounts: an attempt binds only its own files and the gateway's socket.

`container_spec` is the create request of one attempt (pure): the same confinement as the
CLI's `container_argv`, field by field.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any, Mapping

from registry.unix_http import UnixHTTPConnection

from .base import AttemptFiles, Limits
from .sandbox import IN_BASE, IN_EGRESS, IN_PUB, IN_SCRATCH, IN_SPAWN, IN_TASK, IN_WORKER_KEY

API = "/v4.0.0/libpod"
SOCKET_NAME = "podman.sock"
WAIT_INTERVAL = "100ms"  # how often the service looks at a running container's state while we wait


class PodmanApiError(Exception):
    """A request the service answered with an error status (or not at all)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"podman API {status}: {message}")
        self.status = status


def multiplexed(stream: bytes) -> tuple[bytes, bytes]:
    """(stdout, stderr) of a logs answer: frames of [stream, 0, 0, 0, length (4 bytes, big
    endian)] then the bytes (pure). Stream 1 is stdout, 2 stderr; a short tail is dropped."""
    out, err, i = bytearray(), bytearray(), 0
    while i + 8 <= len(stream):
        kind, size = stream[i], int.from_bytes(stream[i + 4:i + 8], "big")
        chunk = stream[i + 8:i + 8 + size]
        (err if kind == 2 else out).extend(chunk)
        i += 8 + size
    return bytes(out), bytes(err)


class PodmanService:
    """One `podman system service` for the run, and a small HTTP client to it."""

    def __init__(self, podman: str, runtime: str | None = None, start_timeout: float = 20.0) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="dome-podman-"))  # 0700: only this user reaches the socket
        self.socket = self.dir / SOCKET_NAME
        # --time=0: never exits on its own; setpriv: it dies with the coordinator's thread that started it
        cmd = [*([shutil.which("setpriv") or "setpriv", "--pdeathsig", "KILL"] if shutil.which("setpriv") else []),
               podman, *(["--runtime", runtime] if runtime else []), "system", "service", "--time=0",
               f"unix://{self.socket}"]
        # its messages go to a file (a pipe nobody reads during the run would fill and stop it)
        with open(self.dir / "service.log", "wb") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                if self.socket.exists() and self.request("GET", "/_ping", timeout=5) is not None:
                    return
            except (OSError, PodmanApiError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.close()
                raise OSError(f"podman system service did not start: {err[-500:]}")
            time.sleep(0.05)

    def request(self, method: str, path: str, body: Any = None, *, timeout: float = 120,
                ok: tuple[int, ...] = (200, 201, 204, 304)) -> Any:
        """One request; the answer's JSON (None when it has no body). Raises PodmanApiError."""
        raw = self.raw(method, path, body, timeout=timeout, ok=ok)
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")

    def raw(self, method: str, path: str, body: Any = None, *, timeout: float = 120,
            ok: tuple[int, ...] = (200, 201, 204, 304)) -> bytes:
        conn = UnixHTTPConnection(str(self.socket), timeout)
        try:
            data = None if body is None else json.dumps(body).encode()
            conn.request(method, API + path, body=data,
                         headers={"Content-Type": "application/json"} if data is not None else {})
            r = conn.getresponse()
            raw = r.read()
        finally:
            conn.close()
        if r.status not in ok:
            try:
                msg = str(json.loads(raw).get("message", ""))
            except (ValueError, AttributeError):
                msg = raw.decode("utf-8", "replace")
            raise PodmanApiError(r.status, msg[-2000:])
        return raw

    # -- the steps of an attempt ---------------------------------------------------------------

    def image(self, ref: str) -> dict[str, Any] | None:
        """What the local store holds under `ref` (a name or a digest), or None."""
        try:
            return self.request("GET", f"/images/{urllib.parse.quote(ref, safe='')}/json", timeout=60)
        except PodmanApiError as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, spec: Mapping[str, Any]) -> str:
        return str(self.request("POST", "/containers/create", spec)["Id"])

    def start(self, name: str) -> None:
        self.request("POST", f"/containers/{name}/start")

    def wait(self, name: str) -> None:
        # an explicit interval: without one the service looks at the state far more often, tens
        # to hundreds of ms of its CPU per second of an attempt
        self.request("POST", f"/containers/{name}/wait?condition=exited&interval={WAIT_INTERVAL}",
                     timeout=7 * 24 * 3600)

    def state(self, name: str) -> tuple[int | None, bool]:
        """(exit code, OOM-killed) of a container that has exited."""
        st = (self.request("GET", f"/containers/{name}/json", timeout=60) or {}).get("State") or {}
        code = st.get("ExitCode")
        return (int(code) if isinstance(code, int) else None), bool(st.get("OOMKilled"))

    def logs(self, name: str) -> tuple[bytes, bytes]:
        return multiplexed(self.raw("GET", f"/containers/{name}/logs?stdout=true&stderr=true", timeout=60))

    def kill(self, name: str) -> None:
        self.request("POST", f"/containers/{name}/kill?signal=KILL", timeout=60, ok=(200, 204, 304, 404, 409))

    def remove(self, name: str) -> None:
        self.request("DELETE", f"/containers/{name}?force=true", timeout=120, ok=(200, 204, 404))

    def close(self) -> str:
        """Stop the service and remove its socket's directory; the end of its log, for a report."""
        err = ""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        try:
            err = (self.dir / "service.log").read_bytes()[-4000:].decode("utf-8", "replace")
        except OSError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
        return err


def _bind(src: Path, dest: str, ro: bool = True) -> dict[str, Any]:
    return {"destination": dest, "type": "bind", "source": str(src), "options": ["rbind", *(["ro"] if ro else [])]}


def _tmpfs(dest: str, mb: int) -> dict[str, Any]:
    return {"destination": dest, "type": "tmpfs", "source": "tmpfs",
            "options": ["rw", "nosuid", "nodev", f"size={mb}m", "mode=1777"]}


def container_spec(files: AttemptFiles, *, image_id: str, name: str, gateway_path: str, limits: Limits,
                   cpus: int, env: Mapping[str, str], nproc: int, user: str,
                   labels: Mapping[str, str] | None = None, cgroup_parent: str | None = None) -> dict[str, Any]:
    """The libpod create request of one attempt (pure): what `container_argv` asks of the CLI."""
    lim = limits
    fsize = lim.max_file_mb * 1024 * 1024
    mounts = [_tmpfs("/tmp", lim.tmp_mb), _tmpfs(IN_SCRATCH, lim.disk_mb),
              _bind(files.base_git, IN_BASE), _bind(files.spawn_json, IN_SPAWN), _bind(files.coordinator_pub, IN_PUB),
              _bind(files.gateway_socket, gateway_path, ro=False),
              *([_bind(files.egress_socket, IN_EGRESS, ro=False)] if files.egress_socket else []),
              *([_bind(files.task_json, IN_TASK)] if files.task_json else []),
              *([_bind(files.worker_key, IN_WORKER_KEY)] if files.worker_key else [])]
    spec: dict[str, Any] = {
        "name": name, "image": image_id, "command": [IN_SPAWN], "labels": dict(labels or {}),
        "netns": {"nsmode": "none"}, "pidns": {"nsmode": "private"}, "ipcns": {"nsmode": "private"},
        "utsns": {"nsmode": "private"},
        "read_only_filesystem": True, "read_write_tmpfs": False,
        "cap_drop": ["ALL"], "no_new_privileges": True, "user": user,
        "resource_limits": {"pids": {"limit": lim.max_processes},
                            "memory": {"limit": lim.memory_mb * 1024 * 1024, "swap": lim.memory_mb * 1024 * 1024},
                            "cpu": {"quota": cpus * 100000, "period": 100000}},
        "r_limits": [{"type": "cpu", "soft": lim.cpu_seconds, "hard": lim.cpu_seconds},
                     {"type": "nofile", "soft": lim.max_open_files, "hard": lim.max_open_files},
                     {"type": "nproc", "soft": nproc, "hard": nproc},
                     {"type": "fsize", "soft": fsize, "hard": fsize},
                     {"type": "core", "soft": 0, "hard": 0}],
        "mounts": mounts, "work_dir": IN_SCRATCH, "env": dict(env),
    }
    if cgroup_parent:
        spec["cgroup_parent"] = cgroup_parent
    return spec
