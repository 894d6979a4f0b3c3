"""RayExecutor on a local Ray: the same SpawnSpec as a Ray task, forced cancel, results via the gateway."""
from __future__ import annotations

import pytest

from coordinator import runstate as rs
from coordinator.executors.ray_executor import gpus_for
from coordinator.executors.sandbox import probe_bwrap
from tests.runloop.conftest import cmd_task, run_queue, write_queue


def test_gpus_from_container_requirements():
    assert gpus_for("registry.example/litho-cuda@sha256:" + "a" * 64) == 1
    assert gpus_for("host@sha256:" + "b" * 64) == 0


@pytest.mark.slow
@pytest.mark.skipif(not probe_bwrap()[0], reason="bubblewrap cannot create namespaces here")
def test_ray_executor_runs_sandboxed_workers_and_cancels_hung_ones(git_repo, ops_root, ledger_env, tmp_path):
    ray = pytest.importorskip("ray")
    from coordinator.executors.base import Limits
    from coordinator.executors.ray_executor import RayExecutor

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        ex = RayExecutor(sandbox="bwrap", max_concurrency=1, limits=Limits())
        tasks = [cmd_task("one", "echo 1 > one.txt"), cmd_task("two", "echo 2 > two.txt", ["one"]),
                 cmd_task("stuck", '[ "$DOME_ATTEMPT" -ge 2 ] || sleep 1000; echo s > s.txt', timeout_s=8,
                          max_attempts=2)]
        q = write_queue(tmp_path, git_repo, tasks, scheduling={"max_parallel": 1, "endgame_max_duplicates": 0})
        _, out = run_queue(q, ops_root, ledger_env, sandbox="bwrap", executor=ex, executor_kind="ray")
        assert out.status == "completed"
        ev = ledger_env[0].events(out.run_id)
        assert all(e.payload["executor"] == "ray" for e in ev if e.topic == rs.TASK_DISPATCHED)
        assert any(e.topic == rs.TASK_TIMEOUT and e.node_id == "stuck" for e in ev)
        assert {e.node_id for e in ev if e.topic == rs.PATCH_SUBMITTED} == {"one", "two", "stuck"}
    finally:
        ray.shutdown()


def test_task_options_carry_gpus_resources_and_the_pinned_image():
    from coordinator.executors.ray_executor import task_options

    cuda = "registry.example/dome-worker-cuda@sha256:" + "c" * 64
    assert task_options(cuda, {"dome_gpu": 1.0}, image_runtime=True) == {
        "num_gpus": 1, "num_cpus": 1, "resources": {"dome_gpu": 1.0}, "runtime_env": {"image_uri": cuda}}
    assert task_options(cuda, {}, image_runtime=False) == {"num_gpus": 1, "num_cpus": 1}
    # the host's own environment is no image: nothing for Ray to start
    assert "runtime_env" not in task_options("host@sha256:" + "b" * 64, {}, image_runtime=True)


def test_ray_worker_image_must_be_pinned_and_needs_the_tls_gateway():
    pytest.importorskip("ray")
    from coordinator.executors.ray_executor import RayExecutor, RayImageInvalid

    with pytest.raises(RayImageInvalid):
        RayExecutor(sandbox="none", image="registry.example/dome-worker:latest", gateway_bind=None)
    with pytest.raises(RayImageInvalid):
        RayExecutor(sandbox="bwrap", image="registry.example/dome-worker:latest", gateway_bind="127.0.0.1")


def test_custom_resources_come_from_the_environment(monkeypatch):
    from coordinator.executors.ray_executor import ray_resources

    monkeypatch.setenv("DOME_RAY_RESOURCES", '{"dome_remote_host": 1}')
    assert ray_resources() == {"dome_remote_host": 1.0}
    monkeypatch.setenv("DOME_RAY_RESOURCES", '{"x": -1}')
    with pytest.raises(ValueError):
        ray_resources()
