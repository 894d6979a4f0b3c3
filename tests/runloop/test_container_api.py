"""The container executor over podman's API service (one `podman system service` per run).

The pure parts (the create request against the command line, the log stream's frames, the
cgroup clean-up) run without podman; the rest start real containers from the worker image
(`$DOME_WORKER_IMAGE`, else ops/container/build.sh's cached ref, as test_container.py does).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coordinator.executors.base import AttemptFiles, Limits
from coordinator.executors.container import (CGROUP_FS, ContainerExecutor, attempt_env, container_argv,
                                             nproc_backstop, remove_cgroup_tree, run_cgroup_parent)
from coordinator.executors.podman_api import container_spec, multiplexed
from tests.attacks import attack
from tests.conftest import REPO_ROOT, dome_cli
from tests.runloop.conftest import cmd_task, write_queue
from tests.runloop.test_container import _containers, both_modes, container_mode, needs_podman, not_fallen_back, \
    worker_image  # noqa: F401 - fixtures

A = "a" * 64


def _files(tmp: Path) -> AttemptFiles:
    return AttemptFiles(spawn_json=tmp / "spawn.json", scratch=tmp / "scratch", base_git=tmp / "base.git",
                        gateway_socket=tmp / "gw.sock", coordinator_pub=tmp / "coordinator.pub", log_dir=tmp / "logs",
                        task_json=tmp / "task.json", worker_key=tmp / "worker.key")


def test_the_api_request_confines_as_the_command_line_does(tmp_path):
    lim = Limits(memory_mb=512, max_processes=64, tmp_mb=32, disk_mb=64, cpu_seconds=30, max_open_files=256)
    f = _files(tmp_path)
    spec = container_spec(f, image_id=A, name="dome-ne-1", gateway_path="/dome/gateway.sock", limits=lim, cpus=1,
                          env=attempt_env(f, lim, 1), nproc=nproc_backstop(), user="10001:10001",
                          cgroup_parent="/x/dome-containers-1-ab")
    argv = container_argv(f, image_id=A, name="dome-ne-1", gateway_path="/dome/gateway.sock", limits=lim, cpus=1,
                          cgroup_parent="/x/dome-containers-1-ab")
    assert spec["netns"] == {"nsmode": "none"} and "--network" in argv
    assert spec["read_only_filesystem"] is True and spec["read_write_tmpfs"] is False
    assert spec["cap_drop"] == ["ALL"] and spec["no_new_privileges"] is True and spec["user"] == "10001:10001"
    assert all(spec[ns] == {"nsmode": "private"} for ns in ("pidns", "ipcns", "utsns"))
    assert spec["resource_limits"]["pids"] == {"limit": 64}
    assert spec["resource_limits"]["memory"] == {"limit": 512 << 20, "swap": 512 << 20}  # no swap beyond it
    rl = {r["type"]: (r["soft"], r["hard"]) for r in spec["r_limits"]}
    assert rl["cpu"] == (30, 30) and rl["nofile"] == (256, 256) and rl["core"] == (0, 0)
    assert spec["image"] == A and spec["command"] == ["/dome/spawn.json"]  # exactly the image checked
    assert spec["env"] == {argv[i + 1].split("=", 1)[0]: argv[i + 1].split("=", 1)[1]
                           for i, a in enumerate(argv) if a == "-e"}
    assert spec["cgroup_parent"] == argv[argv.index("--cgroup-parent") + 1]
    tmpfs = {m["destination"]: m["options"] for m in spec["mounts"] if m["type"] == "tmpfs"}
    assert "size=32m" in tmpfs["/tmp"] and "size=64m" in tmpfs["/dome/scratch"]
    binds = {m["destination"]: m for m in spec["mounts"] if m["type"] == "bind"}
    assert all(Path(m["source"]).parent == tmp_path for m in binds.values())  # the attempt's files, nothing else
    writable = sorted(d for d, m in binds.items() if "ro" not in m["options"])
    assert writable == ["/dome/gateway.sock"]  # every other bind is read-only
    cli_binds = sorted(argv[i + 1].split(":")[1] for i, a in enumerate(argv) if a == "-v")
    assert sorted(binds) == cli_binds


def test_the_log_stream_splits_into_stdout_and_stderr():
    def frame(kind: int, data: bytes) -> bytes:
        return bytes([kind, 0, 0, 0]) + len(data).to_bytes(4, "big") + data
    raw = frame(1, b"out 1\n") + frame(2, b"err\n") + frame(1, b"out 2\n") + frame(2, b"")
    assert multiplexed(raw) == (b"out 1\nout 2\n", b"err\n")
    assert multiplexed(raw + b"\x01\x00\x00") == (b"out 1\nout 2\n", b"err\n")  # a cut frame is dropped


def test_the_run_cgroup_is_removed_in_every_hierarchy_and_nothing_else(tmp_path):
    for top in ("cpuacct", "memory", "pids"):
        (tmp_path / top / "own" / "dome-containers-1-ab" / "libpod-x").mkdir(parents=True)
        (tmp_path / top / "own" / "dome-containers-1-ab" / "conmon").mkdir()
        (tmp_path / top / "own" / "other").mkdir()
    remove_cgroup_tree("/own/dome-containers-1-ab", fs=tmp_path)
    for top in ("cpuacct", "memory", "pids"):
        assert sorted(p.name for p in (tmp_path / top / "own").iterdir()) == ["other"]


# -- podman ------------------------------------------------------------------------------------------

def _attempt(tmp: Path, ex: ContainerExecutor, neid: str) -> tuple[dict, AttemptFiles]:
    f = _files(tmp)
    f.log_dir.mkdir()
    for p in (f.spawn_json, f.task_json, f.coordinator_pub, f.gateway_socket, f.base_git):
        p.write_text("{}")
    f.worker_key.write_text("secret")
    f.worker_key.chmod(0o600)
    return {"node_execution_id": neid, "container_ref": ex.container_ref, "run_id": "run-test",
            "gateway": {"socket": "/dome/gateway.sock"}}, f


def wait_one(ex: ContainerExecutor, timeout: float = 120, every: float = 0.1) -> list:
    """Poll the executor until an attempt has ended (or `timeout` passed); what poll returned."""
    deadline, done = time.monotonic() + timeout, []
    while not done and time.monotonic() < deadline:
        done = ex.poll()
        time.sleep(every)
    return done


@pytest.mark.slow
@pytest.mark.timeout(300)
@needs_podman
@pytest.mark.parametrize("api", [True, False], ids=["api", "command-line"])
def test_an_attempt_runs_its_own_container_which_is_gone_when_it_has_ended(worker_image, tmp_path, api):
    """Either way to podman: the attempt's exit and stderr come back, the host's copy of its key
    is gone, its container is removed before the executor reports it, and its CPU is counted in
    the run's cgroup; at shutdown the service stops, its socket and the run's cgroup are gone."""
    ex = ContainerExecutor(image=worker_image, max_concurrency=1, api=api, mode="fresh")  # nested: test_container_nested
    assert (ex.api is not None) is api, ex.api_error
    service, sock = (ex.api.proc, ex.api.socket) if ex.api is not None else (None, None)
    neid = f"ne-api-{os.getpid()}-{int(api)}"
    spec, f = _attempt(tmp_path, ex, neid)
    try:
        ex.dispatch(spec, f)
        done = wait_one(ex)
        assert done and done[0].node_execution_id == neid
        assert done[0].returncode not in (None, 0, 125), done[0]  # the worker refused the empty SpawnSpec
        assert done[0].stderr_tail.strip(), done[0]  # its stderr came back
        assert not f.worker_key.exists()
        assert _containers(f"io.dome.attempt={neid}") == []  # removed before the attempt was reported
        if ex.cgroup_parent is not None:
            assert ex.cpu.snapshot()["group_s"] > 0 and ex.cpu.snapshot()["groups"] == 1
    finally:
        ex.shutdown()
    if service is not None:
        assert service.poll() is not None and not sock.exists() and not sock.parent.exists()
    if ex.cgroup_parent is not None:
        assert not any((top / ex.cgroup_parent.lstrip("/")).exists() for top in CGROUP_FS.iterdir())


@pytest.mark.slow
@pytest.mark.timeout(120)
@needs_podman
@attack("container-escape")
def test_the_api_service_dies_with_a_coordinator_killed_outright():
    """A coordinator killed with SIGKILL cannot stop the service it started: the service (root's
    whole container API, on a socket) must not outlive it."""
    code = ("import sys, time; from coordinator.executors.podman_api import PodmanService; "
            "s = PodmanService('podman'); print(s.proc.pid, s.dir, flush=True); time.sleep(600)")
    coord = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    pid_s, sock_dir = coord.stdout.readline().split()
    try:
        os.kill(int(pid_s), 0)  # the service runs
        coord.send_signal(signal.SIGKILL)
        coord.wait(10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and Path(f"/proc/{pid_s}").exists() and \
                Path(f"/proc/{pid_s}/stat").read_text().split()[2] != "Z":
            time.sleep(0.1)
        alive = Path(f"/proc/{pid_s}").exists() and Path(f"/proc/{pid_s}/stat").read_text().split()[2] != "Z"
        assert not alive, "the podman service outlived its coordinator"
    finally:
        if Path(f"/proc/{pid_s}").exists():
            os.kill(int(pid_s), signal.SIGKILL)
        subprocess.run(["rm", "-rf", sock_dir], timeout=30)


@pytest.mark.slow
@pytest.mark.timeout(900)
@needs_podman
@attack("container-escape")
@both_modes
def test_an_attempt_reaches_no_socket_but_the_gateway_and_nothing_of_an_earlier_attempt(worker_image, git_repo,
                                                                                          tmp_path, container_mode):
    """Over the API: the only socket an attempt can see is its gateway's (the service's socket,
    root's whole container API, is not there), and what one attempt leaves in /tmp is not in the
    next one's container."""
    walk = ("import os, stat; print('\\n'.join(sorted(os.path.join(d, n) for d, ds, ns in os.walk('/') "
            "if not d.startswith(('/proc', '/sys', '/dev')) for n in ns "
            "if stat.S_ISSOCK(os.lstat(os.path.join(d, n)).st_mode))))")
    # a command may write its checkout and its own $TMPDIR (under /tmp, a tmpfs of the container)
    first = f"python3 -c \"{walk}\" > sockets.txt; echo mine > \"$TMPDIR/left-behind\""
    second = "(find /tmp -name left-behind 2>/dev/null | grep -q . && echo leak=yes || echo leak=no) > second.txt"
    ops = tmp_path / "ops"
    q = write_queue(tmp_path, git_repo, [cmd_task("first", first), cmd_task("second", second, ["first"])])
    r = dome_cli("run", str(q), "--ops-root", str(ops), "--executor", "container", "--image", worker_image,
                 "--json", timeout=600)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == "promoted", r.stdout[-2000:] + r.stderr[-3000:]
    assert not_fallen_back(container_mode, r.stderr), r.stderr[-2000:]

    def shown(path: str) -> str:
        return subprocess.run(["git", "show", f"refs/heads/dome/out:{path}"], cwd=git_repo, capture_output=True,
                              text=True, check=True).stdout
    assert shown("sockets.txt").split() == ["/dome/gateway.sock"]
    assert shown("second.txt").strip() == "leak=no"
    assert _containers(f"io.dome.run={out['run_id']}") == []
    if run_cgroup_parent(1, "x") is not None:  # cgroup v1 as root: the containers' CPU is the run's
        assert out["cost"]["workers_measured_by"] == "cgroup" and out["cost"]["workers_cpu_s"] > 0, out["cost"]
