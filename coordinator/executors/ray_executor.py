"""RayExecutor: the same sandboxed worker, started as a Ray task.

Each attempt is a Ray task that runs the sandboxed worker (bubblewrap,
rlimits) on whichever Ray node gets it, with `num_gpus` taken from the
node's container requirements (an image whose name says cuda or gpu asks
for one GPU) and any custom resources in `$DOME_RAY_RESOURCES` (JSON, e.g.
`{"litho_node": 1}`). The task returns only the exit status: results travel
through the gateway, never through Ray's object store. `kill` is
`ray.cancel(force=True)`, which kills the Ray worker process; the sandbox
dies with it (PR_SET_PDEATHSIG and --die-with-parent).

Two modes:

- one host (no `gateway_bind`): the task runs the LocalExecutor's command
  line, with the attempt's files, the gateway's Unix socket and (for
  `agent` workers) the egress gate's socket in the coordinator's temporary
  directory. Every attempt is therefore pinned to the coordinator's own Ray
  node (a hard node-affinity strategy): on a multi-host cluster it waits
  for that node rather than starting where the sockets do not exist.
- across hosts (`gateway_bind="HOST:PORT"`, `dome run --gateway-bind`): the
  coordinator serves the gateway over TCP with TLS on HOST (certificate made
  at run start). Nothing is shared on disk: the task carries the SpawnSpec,
  the task facts, the coordinator's public key, the attempt's key and the
  base commit as a git bundle; on its node it unpacks them into a private
  directory, starts a relay (coordinator/executors/relay.py) whose Unix
  sockets are the sandbox's only way out and which pins the gateway's
  certificate, builds the bubblewrap command line for that node and runs
  it. Artifacts and proposals go back only through the gateway; the
  directory is removed when the attempt ends. The ledger and the signing
  keys never leave the coordinator. When the run has an egress
  configuration, the same TLS listener also serves the egress gate (ALPN
  `dome-egress`) and the relay gives the sandbox a second socket,
  /dome/egress.sock, that reaches it: an `agent` worker's model calls are
  authorised by its grant and metered in the ledger exactly as on the
  coordinator's host, and the model's key stays on the coordinator. An
  `agent` attempt in a run with no egress configuration is refused at
  dispatch (EGRESS_NOT_CONFIGURED), as is one whose coordinator does not
  serve the gate over TLS (EGRESS_NOT_SERVED).

With `image` (`dome run --executor ray --image NAME@sha256:...`, across hosts
only) each task asks Ray's container runtime environment (`image_uri`) for
the SpawnSpec's image, so the Ray worker that starts the sandbox runs in the
worker image (the CUDA one on GPU nodes). That image must hold Ray of the
cluster's version, bubblewrap and dome's packages (build.sh --variant ray).
"""
from __future__ import annotations

import os

import re
import threading
from typing import Any, Mapping

from registry.errors import DomeError

from .base import AttemptFiles, ExitInfo, Limits, SandboxUnavailable
from .sandbox import bwrap_argv, direct_argv, direct_env, require_bwrap

GPU_IMAGE = re.compile(r"(cuda|gpu)", re.IGNORECASE)
NODE_DIR_PREFIX = "dome-node-"
IMAGE_REF = re.compile(r"^(?!host@)[^@\s]+@sha256:[0-9a-f]{64}$")  # an OCI image pinned by digest (not host@...)


class RayUnavailable(DomeError):
    code = "RAY_UNAVAILABLE"


class RayAuthRefused(DomeError):
    code = "RAY_AUTH_REFUSED"
    hints_default = ["set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) to the cluster's token "
                     "(`ray get-auth-token` on the head node)"]


class GatewayBindInvalid(DomeError):
    code = "GATEWAY_BIND_INVALID"


class RayImageInvalid(DomeError):
    code = "RAY_IMAGE_INVALID"


class EgressNotServed(DomeError):
    code = "EGRESS_NOT_SERVED"


def remote_egress(spec: Mapping[str, Any], has_egress_socket: bool, gateway: Mapping[str, Any]) -> bool:
    """Pure: whether an attempt on another host gets the egress socket. An `agent` attempt that
    could reach no model (the run has no egress gate, or its TLS listener does not serve it) is
    refused here, before its task is started."""
    agent = (spec.get("action_spec") or {}).get("intent") == "agent"
    served = has_egress_socket and bool(gateway.get("egress"))
    if agent and not has_egress_socket:
        raise DomeError("an agent attempt needs the egress gate, and this run has no egress configuration",
                        code="EGRESS_NOT_CONFIGURED", details={"node_id": spec.get("node_id")},
                        hints=["pass --egress CONFIG or put it at OPS_ROOT/egress.json (docs/agent-swarm.md)"])
    if agent and not served:
        raise EgressNotServed("this run's egress gate is not served over TLS, so an agent on another host "
                              "cannot reach it", details={"node_id": spec.get("node_id")})
    return served


def parse_bind(bind: str) -> tuple[str, int]:
    """HOST[:PORT] (an IPv6 host in brackets); port 0 (the default) picks a free one."""
    m = re.fullmatch(r"\[(?P<h6>[0-9a-fA-F:.]+)\](?::(?P<p6>\d+))?|(?P<h>[^:\s\[\]]+)(?::(?P<p>\d+))?", bind.strip())
    if m is None:
        raise GatewayBindInvalid(f"gateway bind {bind!r} is not HOST[:PORT]", details={"bind": bind})
    host = m.group("h6") or m.group("h")
    port = int(m.group("p6") or m.group("p") or 0)
    if not 0 <= port <= 65535:
        raise GatewayBindInvalid(f"gateway bind {bind!r}: port out of range", details={"bind": bind})
    if host in ("0.0.0.0", "::", "*"):  # workers are told this address: it must be one they can reach
        raise GatewayBindInvalid(f"gateway bind {bind!r}: name the address the Ray nodes reach, not every "
                                 "interface", details={"bind": bind})
    return host, port


def ray_resources() -> dict[str, float]:
    """Custom Ray resources every attempt asks for ($DOME_RAY_RESOURCES, a JSON object of numbers)."""
    import json

    raw = os.environ.get("DOME_RAY_RESOURCES", "").strip()
    if not raw:
        return {}
    val = json.loads(raw)
    if not isinstance(val, dict) or not all(isinstance(v, (int, float)) and v > 0 for v in val.values()):
        raise ValueError("DOME_RAY_RESOURCES must be a JSON object of positive numbers")
    return {str(k): float(v) for k, v in val.items()}


def gpus_for(container_ref: str) -> int:
    name = container_ref.split("@", 1)[0]
    return 1 if GPU_IMAGE.search(name) else 0


def _attempt(argv: list[str], env: dict[str, str], log_dir: str, limits: dict[str, int]) -> dict[str, Any]:
    import os
    import subprocess
    from pathlib import Path

    from coordinator.executors.base import Limits as _L
    from coordinator.executors.sandbox import make_preexec

    Path(log_dir).mkdir(parents=True, exist_ok=True)
    with open(os.path.join(log_dir, "worker.stdout"), "wb") as out, \
            open(os.path.join(log_dir, "worker.stderr"), "wb") as err:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env or None,
                             start_new_session=True, preexec_fn=make_preexec(_L(**limits), None))
        rc = p.wait()
    return {"returncode": rc}


def _sweep_node_dirs(tmp: str) -> None:
    """Private directories of attempts whose Ray worker was killed (cancel) on this node."""
    import shutil
    from pathlib import Path

    for d in Path(tmp).glob(NODE_DIR_PREFIX + "*"):
        try:
            pid = int((d / "pid").read_text())
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except (OSError, ValueError):
            continue


def _remote_attempt(blobs: dict[str, bytes], bundle: bytes, gateway: dict[str, Any], limits: dict[str, int],
                    cpus: int) -> dict[str, Any]:
    """On the worker's node: unpack the attempt, relay the gateway, run the sandboxed worker."""
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path

    from coordinator.executors.base import AttemptFiles
    from coordinator.executors.base import Limits as _L
    from coordinator.executors.local import _key_pipe
    from coordinator.executors.relay import Relay
    from coordinator.executors.sandbox import bwrap_argv, make_preexec, probe_bwrap

    tmp = tempfile.gettempdir()
    _sweep_node_dirs(tmp)
    work = Path(tempfile.mkdtemp(prefix=NODE_DIR_PREFIX, dir=tmp))
    relay = None
    try:
        (work / "pid").write_text(str(os.getpid()))
        for name, data in blobs.items():
            mode = 0o600 if name == "worker.key" else 0o644
            fd = os.open(work / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        (work / "base.bundle").write_bytes(bundle)
        git = ["git", "-c", "safe.directory=*"]
        subprocess.run([*git, "init", "--quiet", "--bare", str(work / "base.git")], check=True, capture_output=True)
        subprocess.run([*git, "--git-dir", str(work / "base.git"), "fetch", "--quiet", str(work / "base.bundle"),
                        "refs/*:refs/*"], check=True, capture_output=True)
        (work / "base.bundle").unlink()
        egress = work / "egress.sock" if gateway.get("egress") else None
        relay = Relay(work / "gw.sock", gateway["host"], int(gateway["port"]), gateway["cert_pem"],
                      egress_path=egress)
        relay.start()
        ok, bwrap = probe_bwrap()
        if not ok:
            return {"returncode": 2, "stderr_tail": f"no sandbox on this node: {bwrap}", "node_dir": str(work)}
        files = AttemptFiles(spawn_json=work / "spawn.json", scratch=work / "scratch", base_git=work / "base.git",
                             gateway_socket=work / "gw.sock", coordinator_pub=work / "coordinator.pub",
                             log_dir=work / "logs", task_json=work / "task.json" if "task.json" in blobs else None,
                             worker_key=work / "worker.key" if "worker.key" in blobs else None,
                             egress_socket=egress)
        files.log_dir.mkdir()
        lim = _L(**limits)
        key_fd = _key_pipe(files.worker_key)
        argv = bwrap_argv(files, bwrap=bwrap, limits=lim, worker_key_fd=key_fd, cpus=cpus)
        with open(files.log_dir / "worker.stdout", "wb") as out, open(files.log_dir / "worker.stderr", "wb") as err:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
                                 preexec_fn=make_preexec(lim, None), close_fds=True,
                                 pass_fds=(key_fd,) if key_fd is not None else ())
            if key_fd is not None:
                os.close(key_fd)
                files.worker_key.unlink(missing_ok=True)  # bwrap holds its copy
            rc = p.wait()
        tail = (files.log_dir / "worker.stderr").read_bytes()[-4096:].decode("utf-8", "replace")
        if relay.errors:
            tail += "\n" + "\n".join(relay.errors[-3:])
        return {"returncode": rc, "stderr_tail": tail}
    finally:
        if relay is not None:
            relay.stop()
        shutil.rmtree(work, ignore_errors=True)


def task_options(container_ref: str, resources: Mapping[str, float], *, image_runtime: bool) -> dict[str, Any]:
    """Pure: the Ray options of one attempt's task (GPUs, CPUs, custom resources, the image it runs in)."""
    opts: dict[str, Any] = {"num_gpus": gpus_for(container_ref), "num_cpus": 1}
    if resources:
        opts["resources"] = dict(resources)
    if image_runtime and IMAGE_REF.match(container_ref):
        opts["runtime_env"] = {"image_uri": container_ref}
    return opts


def check_ray_auth(address: str, timeout: float = 5.0) -> None:
    """Ask the cluster's GCS once before joining, so a refused token is a clear RAY_AUTH_REFUSED within
    seconds (ray.init itself retries for about half a minute and then names no reason)."""
    try:
        from ray._raylet import GcsClient
        from ray.exceptions import AuthenticationError
    except ImportError:  # another Ray release: ray.init's own error stands
        return
    if not re.fullmatch(r"[^:/\s]+:\d+", address):  # "auto", "local", ray://...: nothing to ask here
        return
    try:
        GcsClient(address=address).internal_kv_get(b"dome-auth-probe", None, timeout=timeout)
    except AuthenticationError as exc:
        raise RayAuthRefused(f"the Ray cluster at {address} refused this coordinator's token: {str(exc)[:300]}",
                             details={"address": address}, hints=RayAuthRefused.hints_default) from None
    except Exception:  # noqa: BLE001 - unreachable and the like: ray.init reports those
        return


class RayExecutor:
    name = "ray"

    def __init__(self, *, sandbox: str = "bwrap", max_concurrency: int = 4, limits: Limits | None = None,
                 ray_init: Mapping[str, Any] | None = None, gateway_bind: str | None = None,
                 resources: Mapping[str, float] | None = None, image: str | None = None) -> None:
        import ray

        if gateway_bind is not None and sandbox != "bwrap":
            raise SandboxUnavailable("workers on other hosts run only in the bubblewrap sandbox",
                                     details={"sandbox": sandbox})
        if sandbox == "bwrap":
            self.bwrap = require_bwrap()
        self.sandbox = sandbox
        self.max_concurrency = max_concurrency
        self.limits = limits or Limits()
        self.gateway_bind = parse_bind(gateway_bind) if gateway_bind else None
        self.resources = dict(resources) if resources is not None else ray_resources()
        self._gateway: dict[str, Any] | None = None
        self._bundles: dict[str, Any] = {}
        # Ray's container runtime environment: each task's Ray worker runs in the SpawnSpec's image
        self.image_runtime = image is not None
        if image is not None:
            if gateway_bind is None:
                raise RayImageInvalid("Ray tasks in an image share no files with the coordinator: "
                                         "give --gateway-bind too", details={"image": image})
            if not IMAGE_REF.match(image):
                raise RayImageInvalid("the Ray worker image must be pinned: NAME@sha256:<digest>",
                                         details={"image": image})
            self.container_ref = image
        if not ray.is_initialized():
            try:
                if ray_init is None and os.environ.get("RAY_ADDRESS"):
                    check_ray_auth(os.environ["RAY_ADDRESS"])
                    ray.init(log_to_driver=False)  # join the cluster named by RAY_ADDRESS; it sets the resources
                else:
                    ray.init(**(dict(ray_init) if ray_init else {"num_cpus": max_concurrency,
                                                                  "include_dashboard": False,
                                                                  "log_to_driver": False}))
            except RayAuthRefused:
                raise
            except Exception as exc:  # noqa: BLE001 - Ray raises several kinds; each becomes a typed error
                if "auth" in type(exc).__name__.lower() or "token" in str(exc).lower() \
                        or "unauthenticated" in str(exc).lower():
                    raise RayAuthRefused(f"the Ray cluster refused this coordinator: {str(exc)[:500]}",
                                         details={"address": os.environ.get("RAY_ADDRESS", "")},
                                         hints=RayAuthRefused.hints_default) from None
                raise RayUnavailable(f"cannot join the Ray cluster: {str(exc)[:500]}",
                                     details={"address": os.environ.get("RAY_ADDRESS", "")}) from None
        self._ray = ray
        self.node_id = ray.get_runtime_context().get_node_id()  # the coordinator's host: where the sockets are
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        self._strategy = NodeAffinitySchedulingStrategy(node_id=self.node_id, soft=False)
        self._remote = ray.remote(max_retries=0)(_attempt)
        self._remote_node = ray.remote(max_retries=0)(_remote_attempt)
        self._refs: dict[str, Any] = {}
        self._files: dict[str, AttemptFiles] = {}
        self._lock = threading.Lock()

    def connect_gateway(self, host: str, port: int, cert_pem: bytes, *, egress: bool = False) -> None:
        """Where workers on other hosts reach the gateway, and the certificate they pin (run start);
        `egress`: the same listener serves the egress gate too."""
        self._gateway = {"host": host, "port": int(port), "cert_pem": bytes(cert_pem), "egress": bool(egress)}

    def _bundle(self, base_git: Any, sha: str) -> Any:
        """The base commit as a git bundle in Ray's object store, made once per commit."""
        import subprocess
        import tempfile

        ref = self._bundles.get(sha)
        if ref is None:
            name = f"refs/dome/bundle/{sha}"
            subprocess.run(["git", "--git-dir", str(base_git), "update-ref", name, sha], check=True,
                           capture_output=True)
            with tempfile.TemporaryDirectory() as d:
                out = os.path.join(d, "base.bundle")
                subprocess.run(["git", "--git-dir", str(base_git), "bundle", "create", "--quiet", out, name],
                               check=True, capture_output=True)
                with open(out, "rb") as f:
                    ref = self._ray.put(f.read())
            self._bundles[sha] = ref
        return ref

    def dispatch(self, spec: Mapping[str, Any], files: AttemptFiles) -> None:
        lim = {k: getattr(self.limits, k) for k in Limits.__dataclass_fields__}
        opts = task_options(str(spec["container_ref"]), self.resources, image_runtime=self.image_runtime)
        if self.gateway_bind is not None:
            if self._gateway is None:
                raise RayUnavailable("the TLS gateway for remote workers is not running")
            gateway = {**self._gateway, "egress": remote_egress(spec, files.egress_socket is not None, self._gateway)}
            blobs = {"spawn.json": files.spawn_json.read_bytes(), "coordinator.pub": files.coordinator_pub.read_bytes()}
            if files.task_json is not None:
                blobs["task.json"] = files.task_json.read_bytes()
            if files.worker_key is not None:
                blobs["worker.key"] = files.worker_key.read_bytes()
                files.worker_key.unlink(missing_ok=True)  # it travels with the task only
            ref = self._remote_node.options(**opts).remote(blobs, self._bundle(files.base_git, spec["base_ref"]),
                                                           gateway, lim, 1)
        else:
            if self.sandbox == "bwrap":
                argv, env = bwrap_argv(files, bwrap=self.bwrap, limits=self.limits, cpus=1), {}  # num_cpus=1 each
            else:
                argv, env = direct_argv(files), direct_env(files, cpus=1)
            ref = self._remote.options(**opts, scheduling_strategy=self._strategy).remote(
                argv, env, str(files.log_dir), lim)
        with self._lock:
            self._refs[spec["node_execution_id"]] = ref
            self._files[spec["node_execution_id"]] = files

    def running(self) -> list[str]:
        with self._lock:
            return sorted(self._refs)

    def poll(self) -> list[ExitInfo]:
        with self._lock:
            refs = dict(self._refs)
        if not refs:
            return []
        ready, _ = self._ray.wait(list(refs.values()), num_returns=len(refs), timeout=0)
        ready_set = set(ready)
        out = []
        for neid, ref in refs.items():
            if ref not in ready_set:
                continue
            with self._lock:
                self._refs.pop(neid, None)
                files = self._files.pop(neid)
            tail = None
            try:
                res = self._ray.get(ref)
                rc, tail = res["returncode"], res.get("stderr_tail")
            except Exception:  # noqa: BLE001 - cancelled or crashed task
                rc = -9
            if tail is None:
                try:
                    tail = (files.log_dir / "worker.stderr").read_bytes()[-4096:].decode("utf-8", "replace")
                except OSError:
                    tail = ""
            out.append(ExitInfo(neid, rc if rc >= 0 else None, signal=-rc if rc < 0 else None, stderr_tail=tail))
        return out

    def kill(self, node_execution_id: str, reason: str) -> None:
        with self._lock:
            ref = self._refs.get(node_execution_id)
        if ref is not None:
            self._ray.cancel(ref, force=True)

    def shutdown(self) -> None:
        for neid in self.running():
            self.kill(neid, "shutdown")
        import time
        deadline = time.monotonic() + 10
        while self.running() and time.monotonic() < deadline:
            self.poll()
            time.sleep(0.05)
