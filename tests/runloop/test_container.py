"""ContainerExecutor: attempts in OCI containers (podman) from the image pinned by digest.

The pure parts (the pinned-ref decision, the `podman run` command line) are
checked here without podman; the slow tests build the worker image with
ops/container/build.sh (cached: scripts/setup.sh built it, so this call only
prints its ref; `$DOME_WORKER_IMAGE` names another image) and run real queues in it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from coordinator.executors.base import AttemptFiles, Limits
from coordinator.executors.container import (ContainerImageMismatch, ContainerImageUnavailable, check_image,
                                             container_argv, image_digests, parse_ref)
from tests.attacks import attack
from tests.conftest import REPO_ROOT, dome_cli
from tests.runloop.conftest import cmd_task, write_queue

A, B = "a" * 64, "b" * 64


def _files(tmp: Path) -> AttemptFiles:
    return AttemptFiles(spawn_json=tmp / "spawn.json", scratch=tmp / "scratch", base_git=tmp / "base.git",
                        gateway_socket=tmp / "gw.sock", coordinator_pub=tmp / "coordinator.pub", log_dir=tmp / "logs",
                        task_json=tmp / "task.json", worker_key=tmp / "worker.key")


def test_pinned_ref_is_parsed_and_unpinned_ones_are_refused():
    assert parse_ref(f"localhost/dome-worker:ci@sha256:{A}").digest == f"sha256:{A}"
    for bad in ("localhost/dome-worker:ci", f"host@sha256:{A[:10]}", f"sha256:{A}", f"w@sha512:{A}"):
        with pytest.raises(ContainerImageMismatch):
            parse_ref(bad)


@attack("container-image-swap")
def test_image_whose_name_moved_to_another_digest_is_refused():
    ref = parse_ref(f"localhost/dome-worker:ci@sha256:{A}")
    pinned = {"Id": A, "Digest": f"sha256:{'c' * 64}", "RepoDigests": []}
    moved = {"Id": B, "RepoDigests": [f"localhost/dome-worker@sha256:{'d' * 64}"]}
    assert check_image(ref, pinned, pinned) == A
    assert check_image(ref, None, pinned) == A  # the name is gone locally; the digest still runs exactly
    with pytest.raises(ContainerImageMismatch) as err:
        check_image(ref, moved, pinned)
    assert err.value.details["actual"] == f"sha256:{B}"
    with pytest.raises(ContainerImageUnavailable):
        check_image(ref, moved, None)
    assert f"sha256:{'d' * 64}" in image_digests(moved)


def test_container_command_line_confines_like_the_sandbox(tmp_path):
    lim = Limits(memory_mb=512, max_processes=64, tmp_mb=32, disk_mb=64, cpu_seconds=30)
    argv = container_argv(_files(tmp_path), image_id=A, name="dome-ne-1", gateway_path="/dome/gateway.sock",
                          limits=lim, cpus=1)
    joined = " ".join(argv)
    for flag in ("--network none", "--read-only", "--cap-drop ALL", "--security-opt no-new-privileges",
                 "--user 10001:10001", "--pids-limit 64", "--memory 512m", "--memory-swap 512m",
                 '"cgroup_root": "/sys/fs/cgroup"',
                 "--ulimit cpu=30:30", "/tmp:rw,nosuid,nodev,size=32m", "/dome/scratch:rw,nosuid,nodev,size=64m",
                 f"{tmp_path}/base.git:/dome/base.git:ro", f"{tmp_path}/gw.sock:/dome/gateway.sock",
                 f"{tmp_path}/worker.key:/dome/worker.key:ro"):
        assert flag in joined, flag
    assert argv[-2:] == [A, "/dome/spawn.json"]  # started by image id: exactly what was checked
    mounts = [argv[i + 1].split(":")[0] for i, a in enumerate(argv) if a == "-v"]
    assert all(Path(m).parent == tmp_path for m in mounts), mounts  # the attempt's files, nothing else of the host


# -- podman ------------------------------------------------------------------------------------------

def _podman_ok() -> bool:
    return shutil.which("podman") is not None and shutil.which("mmdebstrap") is not None


needs_podman = pytest.mark.skipif(not _podman_ok(), reason="podman and mmdebstrap are not installed")


@pytest.fixture(scope="session")
def worker_image() -> str:
    ref = os.environ.get("DOME_WORKER_IMAGE")
    if ref:
        return ref
    r = subprocess.run(["bash", str(REPO_ROOT / "ops" / "container" / "build.sh")], capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip().splitlines()[-1]


@pytest.fixture
def container_mode(request, monkeypatch) -> str:
    """A container per attempt, or one run container with a sandbox per attempt inside
    (coordinator/executors/nested.py): the same confinement is asserted of both (`both_modes`)."""
    monkeypatch.setenv("DOME_CONTAINER_MODE", request.param)
    return request.param


both_modes = pytest.mark.parametrize("container_mode", ["fresh", "nested"], indirect=True)


def not_fallen_back(mode: str, stderr: str) -> bool:
    """In nested mode the run did not fall back to a container per attempt."""
    return mode != "nested" or "a fresh container per attempt" not in stderr


def _containers(label: str) -> list[str]:
    r = subprocess.run(["podman", "ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}"],
                       capture_output=True, text=True, timeout=60)
    return r.stdout.split()


@pytest.mark.slow
@pytest.mark.timeout(900)
@needs_podman
@attack("container-escape")
@both_modes
def test_queue_runs_in_the_pinned_image_confined_and_is_promoted_and_verified(worker_image, git_repo, tmp_path,
                                                                             container_mode):
    ops = tmp_path / "ops"
    probe = ("echo uid=$(id -u) > probe.txt; "
             "grep CapEff /proc/self/status >> probe.txt; "
             "(touch /etc/x 2>/dev/null && echo root=writable || echo root=readonly) >> probe.txt; "
             f"(test -e {ops} && echo ops=visible || echo ops=absent) >> probe.txt; "
             f"(test -e {git_repo} && echo repo=visible || echo repo=absent) >> probe.txt; "
             "(python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), 2)' 2>/dev/null "
             "&& echo net=open || echo net=none) >> probe.txt; "
             "(test -r /dome/worker.key && echo key=delivered || echo key=missing) >> probe.txt")
    tasks = [cmd_task("probe", probe), cmd_task("two", "echo 2 > two.txt", ["probe"])]
    q = write_queue(tmp_path, git_repo, tasks)
    r = dome_cli("run", str(q), "--ops-root", str(ops), "--executor", "container", "--image", worker_image,
                 "--json", timeout=600)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == "promoted", r.stdout[-2000:] + r.stderr[-3000:]
    assert not_fallen_back(container_mode, r.stderr), r.stderr[-2000:]
    v = dome_cli("verify", out["run_id"], "--ops-root", str(ops), "--repo", str(git_repo), timeout=300)
    assert v.returncode == 0, v.stdout + v.stderr
    got = dict(line.split("=", 1) for line in subprocess.run(
        ["git", "show", "refs/heads/dome/out:probe.txt"], cwd=git_repo, capture_output=True, text=True,
        check=True).stdout.replace("CapEff:\t", "capeff=").split("\n") if "=" in line)
    assert got == {"uid": "10001", "capeff": "0000000000000000", "root": "readonly", "ops": "absent",
                   "repo": "absent", "net": "none", "key": "delivered"}, got
    events = [json.loads(p.read_text()) for p in (ops / "runs" / out["run_id"] / "events").glob("event.*.json")]
    dispatched = [e for e in events if e.get("topic") == "task.dispatched"]
    assert dispatched and all(e["payload"]["executor"] == "container" for e in dispatched)
    started = next(e for e in events if e.get("topic") == "run.started")
    assert started["payload"]["environment"]["executor"] == "container"
    assert _containers(f"io.dome.run={out['run_id']}") == []  # every attempt's container (or the run's) is removed


@pytest.mark.slow
@pytest.mark.timeout(900)
@needs_podman
@attack("container-image-swap")
def test_spawn_spec_pinning_another_image_is_refused_before_start(worker_image, git_repo, tmp_path):
    """A work queue pins a digest the image's name no longer points at: each attempt is refused
    with CONTAINER_IMAGE_MISMATCH before any container exists, and the run does not promote."""
    from coordinator.executors.container import ContainerExecutor

    ex = ContainerExecutor(image=worker_image)
    name = worker_image.split("@", 1)[0]
    other = subprocess.run(["podman", "images", "--noheading", "--no-trunc", "--format", "{{.ID}}"],
                           capture_output=True, text=True, check=True).stdout.split()
    other_id = next(i.removeprefix("sha256:") for i in other if i.removeprefix("sha256:") != ex.container_ref[-64:])
    forged = f"{name}@sha256:{other_id}"
    with pytest.raises(ContainerImageMismatch):
        ex.resolve(forged)
    with pytest.raises(ContainerImageUnavailable):
        ex.resolve(f"{name}@sha256:{'e' * 64}")
    ops = tmp_path / "ops"
    q = write_queue(tmp_path, git_repo, [cmd_task("t", "echo t > t.txt", containers=[forged], max_attempts=1)])
    r = dome_cli("run", str(q), "--ops-root", str(ops), "--executor", "container", "--image", worker_image,
                 "--json", timeout=300)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == "failed", r.stdout[-2000:]
    events = [json.loads(p.read_text()) for p in (ops / "runs" / out["run_id"] / "events").glob("event.*.json")]
    failed = [e["payload"] for e in events if e.get("topic") == "task.failed"]
    assert failed and all(f["error"]["code"] == "CONTAINER_IMAGE_MISMATCH" for f in failed), failed
    assert _containers(f"io.dome.run={out['run_id']}") == []  # nothing was started


def test_only_containers_of_a_dead_coordinator_on_this_host_are_orphans():
    from coordinator.executors.container import LABEL, OWNER_LABEL, orphans

    def c(name, owner, attempt=True):
        return {"Names": [name], "Labels": {**({LABEL: "ne-1"} if attempt else {}), OWNER_LABEL: owner}}
    found = [c("dead", "h:11"), c("live", "h:22"), c("elsewhere", "other:11"), c("not-dome", "h:11", attempt=False)]
    assert orphans(found, "h", lambda pid: pid == 22) == ["dead"]


@pytest.mark.slow
@pytest.mark.timeout(900)
@needs_podman
def test_attempt_containers_of_a_killed_coordinator_are_removed(worker_image):
    """A coordinator killed with SIGKILL leaves its detached containers; the next one removes them."""
    import socket as _socket

    from coordinator.executors.container import LABEL, OWNER_LABEL, ContainerExecutor

    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that no longer runs
    image_id = worker_image.rsplit("@", 1)[1]
    name = f"dome-orphan-{os.getpid()}"
    ex = ContainerExecutor(image=worker_image)  # (also sweeps; the orphan is made after it)
    r = subprocess.run(["podman", *(["--runtime", ex.runtime] if ex.runtime else []), "run", "-d", "--name", name,
                        "--label", f"{LABEL}=ne-orphan", "--label", f"{OWNER_LABEL}={_socket.gethostname()}:{dead.pid}",
                        "--network", "none", "--ulimit", "nofile=256:256", "--ulimit", "nproc=64:64",
                        "--entrypoint", "sleep", image_id, "600"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    try:
        assert name in _containers(f"{LABEL}=ne-orphan")
        ContainerExecutor(image=worker_image)
        assert _containers(f"{LABEL}=ne-orphan") == []
    finally:
        subprocess.run(["podman", "rm", "-f", name], capture_output=True, timeout=120)


@pytest.mark.slow
@pytest.mark.timeout(900)
@needs_podman
@both_modes
def test_hung_attempt_is_killed_at_its_deadline_and_its_container_removed(worker_image, git_repo, tmp_path,
                                                                          container_mode):
    ops = tmp_path / "ops"
    q = write_queue(tmp_path, git_repo, [cmd_task("stuck", "sleep 1000", timeout_s=6, max_attempts=1)])
    r = dome_cli("run", str(q), "--ops-root", str(ops), "--executor", "container", "--image", worker_image,
                 "--json", timeout=300)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == "failed", r.stdout[-2000:]
    events = [json.loads(p.read_text()) for p in (ops / "runs" / out["run_id"] / "events").glob("event.*.json")]
    assert any(e["topic"] == "task.timeout" for e in events), sorted({e["topic"] for e in events})
    assert not_fallen_back(container_mode, r.stderr), r.stderr[-2000:]
    assert _containers(f"io.dome.run={out['run_id']}") == []


@pytest.mark.slow
@pytest.mark.timeout(900)
@needs_podman
@attack("sandbox-exhaustion")
@both_modes
def test_limits_hit_in_a_container_fail_the_attempt_with_sandbox_violation(worker_image, git_repo, ops_root,
                                                                          ledger_env, tmp_path, container_mode):
    """Filling /tmp and the scratch past their caps, a fork bomb and a memory hog, each in an action that
    exits 0 in its container: every one fails SANDBOX_VIOLATION; an honest task under the same limits succeeds."""
    from coordinator.executors.container import ContainerExecutor
    from tests.runloop.conftest import run_queue
    from tests.runloop.test_sandbox_limits import _ended, _violation

    from coordinator import runstate as rs

    limits = {"memory_mb": 512, "tmp_mb": 32, "disk_mb": 32, "max_processes": 48}
    fill = "dd if=/dev/zero of={} bs=1M count=96 2>&1; echo dd=$?; true"
    tasks = [cmd_task("fill-tmp", fill.format('"$TMPDIR/big"'), outputs=(), max_attempts=1),
             cmd_task("fill-scratch", fill.format("big.bin"), outputs=(), max_attempts=1),
             cmd_task("fork-bomb", "i=0; while [ $i -lt 200 ]; do (sleep 5 &) 2>/dev/null; i=$((i+1)); done; "
                                   "echo done", outputs=(), max_attempts=1, timeout_s=60),
             cmd_task("memory-hog", "python3 -c \"b = b'x' * (768 << 20); print(len(b))\"; true", outputs=(),
                      max_attempts=1),
             cmd_task("honest", "head -c 1048576 /dev/zero > small.bin", max_attempts=1)]
    q = write_queue(tmp_path, git_repo, tasks, limits=limits,
                    scheduling={"max_parallel": 2, "endgame_max_duplicates": 0})
    ex = ContainerExecutor(image=worker_image, max_concurrency=2, limits=Limits.from_work_queue(limits))
    _, out = run_queue(q, ops_root, ledger_env, sandbox="bwrap", executor=ex, executor_kind="container")
    assert ex.mode == container_mode and (container_mode == "fresh" or None not in ex._runs.values())
    ev = ledger_env[0].events(out.run_id)
    assert "tmp_limit" in _violation(ev, "fill-tmp")
    assert "disk_limit" in _violation(ev, "fill-scratch")
    assert "process_limit" in _violation(ev, "fork-bomb")
    assert "memory_limit" in _violation(ev, "memory-hog")
    honest = _ended(ev, "honest")
    assert honest.topic == rs.TASK_COMPLETED and honest.payload["outcome"] == "succeeded", honest.payload
