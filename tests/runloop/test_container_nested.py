"""The container executor's nested mode: one run container per image, a fresh bubblewrap sandbox
per attempt inside it (coordinator/executors/nested.py, worker_sdk/nested.py).

The pure parts (the attempt's sandbox request, the run container's create request) run without
podman; the rest start the run container from the worker image and attack the boundary between
an attempt and the run container, and between attempts that share it.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from coordinator.executors.base import AttemptFiles, Limits
from coordinator.executors.nested import (DATA_FD, IN_CG, IN_CTL, attempt_request, container_mode,
                                          run_container_spec)
from coordinator.executors.sandbox import CONFINEMENT
from tests.attacks import attack
from tests.conftest import REPO_ROOT, dome_cli
from tests.runloop.conftest import cmd_task, write_queue
from tests.runloop.test_container import _containers, needs_podman, worker_image  # noqa: F401 - a fixture


def _files(tmp: Path) -> AttemptFiles:
    return AttemptFiles(spawn_json=tmp / "spawn.json", scratch=tmp / "scratch", base_git=tmp / "base.git",
                        gateway_socket=tmp / "gw.sock", coordinator_pub=tmp / "coordinator.pub", log_dir=tmp / "logs",
                        task_json=tmp / "task.json", worker_key=tmp / "worker.key")


def _opts(argv: list[str], flag: str, n: int) -> list[tuple[str, ...]]:
    return [tuple(argv[i + 1:i + 1 + n]) for i, a in enumerate(argv) if a == flag]


def test_an_attempts_sandbox_in_the_run_container_gets_its_own_files_and_nothing_of_the_container(tmp_path):
    """The request for one attempt: the confinement of a host sandbox, the attempt's spawn spec,
    facts and key copied in from descriptors, its own cgroups read-only, and no bind of the run
    container's control directory, its cgroup directories or its root."""
    lim = Limits(memory_mb=512, max_processes=64, tmp_mb=32, disk_mb=64, cpu_seconds=30, max_open_files=256)
    req = attempt_request(_files(tmp_path), "ne-1", lim, 1)
    bw = req["bwrap"]
    assert bw[0] == "/usr/bin/bwrap" and all(flag in bw for flag in CONFINEMENT)
    assert "--as-pid-1" in bw and bw[bw.index("--") + 1:bw.index("--") + 3] == ["/bin/sh", "-c"]  # the zygote's stub
    data = dict((dest, fd) for fd, dest in _opts(bw, "--ro-bind-data", 2))
    assert data == {"/dome/spawn.json": str(DATA_FD), "/dome/task.json": str(DATA_FD + 1),
                    "/dome/worker.key": str(DATA_FD + 2)}
    binds = _opts(bw, "--ro-bind", 2) + _opts(bw, "--bind", 2) + _opts(bw, "--ro-bind-try", 2)
    sources = [s for s, _ in binds]
    assert "/" not in sources and not any(s == IN_CTL or s.startswith(IN_CTL + "/") for s in sources)
    assert sorted((s, d) for s, d in binds if s.startswith(IN_CG)) == [
        (f"{IN_CG}/memory/ne-1", "/dome/cgroup/memory"), (f"{IN_CG}/pids/ne-1", "/dome/cgroup/pids")]
    assert ("/dome/run/gateway.sock", "/dome/gateway.sock") in _opts(bw, "--bind", 2)  # the one writable bind
    assert [d for _, d in _opts(bw, "--bind", 2)] == ["/dome/gateway.sock"]
    sizes = {bw[i + 3]: int(bw[i + 1]) for i, a in enumerate(bw) if a == "--size" and bw[i + 2] == "--tmpfs"}
    assert sizes == {"/tmp": 32 << 20, "/dome/scratch": 64 << 20}  # a fresh, capped /tmp and scratch
    assert req["worker"]["cgroups"] == [f"{IN_CG}/memory/ne-1", f"{IN_CG}/pids/ne-1"]
    assert req["worker"]["argv"] == ["/dome/spawn.json"] and req["worker"]["cwd"] == "/dome/scratch"
    moved = attempt_request(_files(tmp_path), "ne-1", lim, 1, "/run/x/gw.sock")["bwrap"]  # where the SpawnSpec says
    assert [b for b in _opts(moved, "--bind", 2)] == [("/dome/run/gateway.sock", "/run/x/gw.sock")]
    import resource
    rl = dict((r, v) for r, v in req["rlimits"])
    assert rl[resource.RLIMIT_CPU] == 30 and rl[resource.RLIMIT_NOFILE] == 256
    assert rl[resource.RLIMIT_FSIZE] == lim.max_file_mb << 20 and rl[resource.RLIMIT_CORE] == 0


def test_an_attempts_proc_is_masked_as_podman_masks_a_containers():
    from coordinator.executors.nested import image_view
    a, _ = image_view(16, (("keys", False), ("acpi", True)))
    proc = a.index("--proc")
    assert a[proc:proc + 2] == ["--proc", "/proc"]
    assert a[proc + 2:proc + 9] == ["--ro-bind", "/dev/null", "/proc/keys", "--tmpfs", "/proc/acpi", "--remount-ro",
                                    "/proc/acpi"]  # after the fresh /proc is mounted, over it


def test_the_run_container_is_confined_as_an_attempt_container_and_labelled_for_the_sweep(tmp_path):
    lim = Limits(memory_mb=512, max_processes=64)
    groups = {"memory": Path("/sys/fs/cgroup/memory/x/a"), "pids": Path("/sys/fs/cgroup/pids/x/a")}
    spec = run_container_spec(_files(tmp_path), image_id="a" * 64, name="dome-run-1", ctl=tmp_path / "ctl",
                              groups=groups, limits=lim, cpus=1, max_concurrency=2, nproc=4096, user="10001:10001",
                              labels={"io.dome.attempt": "run", "io.dome.coordinator": "h:1"},
                              cgroup_parent="/x/dome-containers-1-ab")
    assert spec["cgroup_parent"] == "/x/dome-containers-1-ab"  # counted as the run's workers
    assert spec["netns"] == {"nsmode": "none"} and spec["read_only_filesystem"] is True
    assert spec["cap_drop"] == ["ALL"] and spec["no_new_privileges"] is True and spec["user"] == "10001:10001"
    assert spec["remove"] is True and spec["labels"]["io.dome.attempt"] == "run"  # orphans are swept by label
    assert spec["unmask"] == ["/proc/*"]  # /sys stays masked
    assert spec["entrypoint"] == ["python3", "-s", "-m", "worker_sdk.nested"] and spec["image"] == "a" * 64
    binds = {m["destination"]: m for m in spec["mounts"] if m["type"] == "bind"}
    writable = sorted(d for d, m in binds.items() if "ro" not in m["options"])
    assert writable == ["/dome/cg/memory", "/dome/cg/pids", IN_CTL, "/dome/run/gateway.sock"]
    assert spec["resource_limits"]["pids"]["limit"] == 3 * 64 + 64  # the attempts' groups limit each one


def test_the_container_mode_is_fresh_or_nested():
    assert container_mode("nested") == "nested" and container_mode("fresh") == "fresh"
    assert container_mode() == os.environ.get("DOME_CONTAINER_MODE", "nested")
    with pytest.raises(ValueError):
        container_mode("shared")


def test_only_run_directories_of_a_dead_coordinator_are_swept(tmp_path):
    from coordinator.executors.nested import sweep_dirs
    for name in ("dome-nested-11-ab", "dome-nested-22-cd", "dome-nested-x-ef", "other-11-ab"):
        (tmp_path / name).mkdir()
    assert sweep_dirs(lambda pid: pid == 22, tmp_path) == [tmp_path / "dome-nested-11-ab"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dome-nested-22-cd", "dome-nested-x-ef", "other-11-ab"]


def _nested_or_skip(ex) -> None:
    if ex.cgroup_parent is None:  # pragma: no cover - the nested mode needs per-attempt cgroups
        pytest.fail("nested mode needs cgroup v1 as root here")


@pytest.mark.slow
@pytest.mark.timeout(600)
@needs_podman
@attack("container-escape")
def test_concurrent_attempts_see_neither_each_others_files_nor_processes_nor_the_run_containers_socket(
        worker_image, git_repo, tmp_path, monkeypatch):
    """Two attempts run side by side in one run container: each leaves a file in /tmp and its
    scratch and a process named after it, then looks for the other's (files anywhere, processes in
    /proc), for any socket but its gateway's and for the run container's control directory."""
    monkeypatch.setenv("DOME_CONTAINER_MODE", "nested")
    look = ("import os, stat, sys, time; me = sys.argv[1]; time.sleep(2.5); "
            "files = sorted(os.path.join(d, n) for d, ds, ns in os.walk('/') "
            "if not d.startswith(('/proc', '/sys', '/dev')) for n in ns if n.startswith('mark-')); "
            "socks = sorted(os.path.join(d, n) for d, ds, ns in os.walk('/') "
            "if not d.startswith(('/proc', '/sys', '/dev')) for n in ns "
            "if stat.S_ISSOCK(os.lstat(os.path.join(d, n)).st_mode)); "
            "procs = sorted({open(f'/proc/{p}/cmdline', 'rb').read().replace(bytes(1), b' ').decode().strip() "
            "for p in os.listdir('/proc') if p.isdigit()}); "
            "print(json.dumps({'files': files, 'procs': [p for p in procs if 'mark-' in p and 'sys.argv' not in p], "
            "'socks': socks, 'ctl': os.path.exists('/dome/ctl') or os.path.exists('/dome/cg'), "
            "'masked': sorted(n for n in ('keys', 'timer_list', 'acpi', 'kcore', 'sched_debug') "
            "if os.path.isfile(f'/proc/{n}') and os.stat(f'/proc/{n}').st_rdev == 0 "
            "or os.path.isdir(f'/proc/{n}') and os.listdir(f'/proc/{n}'))}))")
    look = "import json; " + look

    def task(name: str) -> dict:
        return cmd_task(name, f"echo x > \"$TMPDIR/mark-{name}\"; echo x > mark-{name}.tmp; "
                              f"(python3 -c 'import time; time.sleep(6)' mark-{name} &) ; python3 -c \"{look}\" {name} > {name}.json; "
                              f"rm -f mark-{name}.tmp")
    q = write_queue(tmp_path, git_repo, [task("a"), task("b")], scheduling={"max_parallel": 2})
    ops = tmp_path / "ops"
    r = dome_cli("run", str(q), "--ops-root", str(ops), "--executor", "container", "--image", worker_image,
                 "--json", timeout=300)
    assert "a fresh container per attempt" not in r.stderr, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == "promoted", r.stdout[-2000:] + r.stderr[-3000:]
    seen = {}
    for name in ("a", "b"):
        seen[name] = json.loads(subprocess.run(["git", "show", f"refs/heads/dome/out:{name}.json"], cwd=git_repo,
                                               capture_output=True, text=True, check=True).stdout)
    for me, other in (("a", "b"), ("b", "a")):
        got = seen[me]
        assert not any(f"mark-{other}" in f for f in got["files"]), got
        assert any(f"mark-{me}" in f for f in got["files"]), got  # it does see its own
        assert not any(f"mark-{other}" in p for p in got["procs"]), got
        assert any(f"mark-{me}" in p for p in got["procs"]), got  # its own process is listed
        assert got["socks"] == ["/dome/gateway.sock"] and got["ctl"] is False, got
        assert got["masked"] == [], got  # what podman masks in a container is masked in the sandbox too
    assert _containers(f"io.dome.run={out['run_id']}") == []


def _named(name: str) -> list[str]:
    r = subprocess.run(["podman", "ps", "-a", "--filter", f"name=^{name}$", "--format", "{{.Names}}"],
                       capture_output=True, text=True, timeout=60)
    return r.stdout.split()


def _host_procs(tag: str) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and tag.encode() in (p / "cmdline").read_bytes():
                out.append(int(p.name))
        except OSError:
            pass
    return out


@pytest.mark.slow
@pytest.mark.timeout(600)
@needs_podman
@attack("container-escape")
def test_a_process_an_attempt_leaves_running_is_gone_when_the_attempt_ends(worker_image, git_repo, tmp_path):
    """An attempt starts a detached process in a new session and exits 0; once the attempt has
    ended (while the run container still serves the next one) no process of it runs on the host,
    and its cgroups are gone."""
    tag = f"dome-linger-{os.getpid()}"
    # the tag is put together by the shell: no command line but the process's own holds it whole
    split = f"'{tag[:5]}''{tag[5:]}'"
    probe = f"import os; t = {tag[:5]!r} + {tag[5:]!r}; print(any(t.encode() in open(f'/proc/{{p}}/cmdline', 'rb').read() " \
            "for p in os.listdir('/proc') if p.isdigit()))"
    first = f"(setsid python3 -c 'import time; time.sleep(300)' {split} </dev/null >/dev/null 2>&1 &); sleep 0.5; " \
            f"python3 -c \"{probe}\" > one.txt"
    second = "sleep 4.321; echo 2 > two.txt"
    q = write_queue(tmp_path, git_repo, [cmd_task("first", first), cmd_task("second", second, ["first"])])
    ops = tmp_path / "ops"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "DOME_CONTAINER_MODE": "nested"}
    proc = subprocess.Popen([sys.executable, "-m", "coordinator.cli.main", "run", str(q), "--ops-root", str(ops),
                             "--executor", "container", "--image", worker_image, "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lingering: list[int] = []
    try:
        deadline = time.monotonic() + 240
        checked = False
        while time.monotonic() < deadline and proc.poll() is None and not checked:
            if _host_procs("sleep 4.321"):  # the second attempt runs: the first has ended, the run container is up
                time.sleep(0.5)
                lingering = _host_procs(tag)
                checked = True
            time.sleep(0.05)
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _host_procs(tag):
            os.kill(pid, signal.SIGKILL)
    out = json.loads(stdout.strip().splitlines()[-1])
    assert out["status"] == "promoted", stdout[-2000:] + stderr[-3000:]
    assert checked, "the second attempt was never seen dispatched"
    shown = subprocess.run(["git", "show", "refs/heads/dome/out:one.txt"], cwd=git_repo, capture_output=True,
                           text=True, check=True).stdout
    assert shown.strip() == "True"  # it ran when its attempt ended
    assert lingering == [], f"a process of the first attempt outlived it: {lingering}"


@pytest.mark.slow
@pytest.mark.timeout(300)
@needs_podman
@attack("container-escape")
def test_the_run_container_ends_and_is_removed_when_its_coordinator_is_killed_outright(worker_image, tmp_path):
    """A coordinator killed with SIGKILL cannot close its run container: the lifeline does, and
    podman removes the container."""
    code = ("import json, sys, time; from pathlib import Path; "
            "from coordinator.executors.container import ContainerExecutor; "
            "from tests.runloop.test_container_api import _attempt; "
            "ex = ContainerExecutor(image=sys.argv[1], max_concurrency=1, mode='nested'); "
            "spec, f = _attempt(Path(sys.argv[2]), ex, 'ne-killed'); ex.dispatch(spec, f); "
            "run = next(iter(ex._runs.values())); print(run.name if run else '', flush=True); time.sleep(600)")
    coord = subprocess.Popen([sys.executable, "-c", code, worker_image, str(tmp_path)], stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    name = coord.stdout.readline().strip()
    try:
        assert name, "no run container was started"
        assert _containers(f"io.dome.coordinator={os.uname().nodename}:{coord.pid}") == [name]
        coord.send_signal(signal.SIGKILL)
        coord.wait(10)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _containers(f"io.dome.coordinator={os.uname().nodename}:{coord.pid}"):
            time.sleep(0.2)
        assert _containers(f"io.dome.coordinator={os.uname().nodename}:{coord.pid}") == []
        from coordinator.executors.nested import DIR_PREFIX, sweep_dirs
        left = list(Path(tempfile.gettempdir()).glob(f"{DIR_PREFIX}{coord.pid}-*"))
        assert left and set(left) <= set(sweep_dirs(lambda pid: pid == os.getpid() or Path(f"/proc/{pid}").exists()))
        assert not any(p.exists() for p in left)  # what the next coordinator's sweep does
        from coordinator.executors.container import CGROUP_FS, sweep_run_cgroups
        swept = sweep_run_cgroups(lambda pid: pid != coord.pid)  # and its run's cgroups
        assert any(f"dome-containers-{coord.pid}-" in g for g in swept)
        assert not list((CGROUP_FS / "memory").rglob(f"dome-containers-{coord.pid}-*"))
    finally:
        if coord.poll() is None:
            coord.kill()
        if name:
            subprocess.run(["podman", "rm", "-f", name], capture_output=True, timeout=120)


@pytest.mark.slow
@pytest.mark.timeout(300)
@needs_podman
def test_an_attempts_sandbox_and_processes_are_gone_when_it_has_ended_and_the_run_container_at_shutdown(
        worker_image, tmp_path):
    """Nested mode's counterpart of a container per attempt being removed: the attempt's exit and
    log come back, the host's key is gone, its cgroups are gone before it is reported, its CPU is
    the run's; at shutdown the run container, its control directory and the run's cgroup are gone."""
    from coordinator.executors.container import CGROUP_FS, ContainerExecutor
    from tests.runloop.test_container_api import _attempt, wait_one

    ex = ContainerExecutor(image=worker_image, max_concurrency=1, mode="nested")
    _nested_or_skip(ex)
    spec, f = _attempt(tmp_path, ex, "ne-nested-1")
    try:
        ex.dispatch(spec, f)
        run = next(iter(ex._runs.values()))
        assert run is not None
        done = wait_one(ex, every=0.05)
        assert done and done[0].node_execution_id == "ne-nested-1"
        assert done[0].returncode not in (None, 0, 125), done[0]  # the worker refused the empty SpawnSpec
        assert done[0].stderr_tail.strip(), done[0]
        assert not f.worker_key.exists()
        assert not any((g / "ne-nested-1").exists() for g in run.groups.values())
        assert _named(run.name) == [run.name]  # the run container serves the next attempt
        assert ex.cpu.snapshot()["group_s"] > 0
    finally:
        ex.shutdown()
    assert _named(run.name) == [] and not run.dir.exists()
    assert not any((top / ex.cgroup_parent.lstrip("/")).exists() for top in CGROUP_FS.iterdir())


@pytest.mark.slow
@pytest.mark.timeout(300)
@needs_podman
def test_an_image_without_bubblewrap_falls_back_to_a_container_per_attempt_and_says_why(worker_image, tmp_path,
                                                                                        capfd):
    from coordinator.executors.container import ContainerExecutor
    from tests.runloop.test_container_api import _attempt, wait_one

    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Containerfile").write_text(
        f"FROM {worker_image.rsplit('@', 1)[1]}\nUSER 0\nRUN rm -f /usr/bin/bwrap\nUSER 10001:10001\n")
    tag = f"localhost/dome-worker-nobwrap:{os.getpid()}"
    ex0 = ContainerExecutor(image=worker_image)
    r = subprocess.run(["podman", *(["--runtime", ex0.runtime] if ex0.runtime else []), "build", "--quiet",
                        "--network", "none", "-t", tag, str(tmp_path / "ctx")], capture_output=True, text=True,
                       timeout=240)
    ex0.shutdown()
    assert r.returncode == 0, r.stderr
    try:
        image_id = r.stdout.strip().splitlines()[-1]
        ex = ContainerExecutor(image=f"{tag}@sha256:{image_id.removeprefix('sha256:')}", max_concurrency=1,
                               mode="nested")
        spec, f = _attempt(tmp_path, ex, "ne-nobwrap")
        try:
            ex.dispatch(spec, f)
            done = wait_one(ex)
            assert done and done[0].returncode not in (None, 0, 125), done  # it ran, in a container of its own
            assert list(ex._runs.values()) == [None]
        finally:
            ex.shutdown()
        assert "a fresh container per attempt (refused: the image has no bwrap)" in capfd.readouterr().err
    finally:
        subprocess.run(["podman", "rmi", "-f", tag], capture_output=True, timeout=120)
