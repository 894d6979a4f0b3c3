"""Executors side by side: the same queue through local sandboxes, containers and Ray.

`python benchmarks/executors.py [--tasks N] [--parallel P] [--image REF] [--only local,container,ray,ray-tls]`

Each configuration runs the same work queue (N independent tasks that each write one file, then the
integration stage: verify, stack, validate, promote) through the real RunLoop in this process, one
after the other, on fresh repositories and ledgers:

- local:     LocalExecutor, bubblewrap (the baseline);
- container: ContainerExecutor, podman, from the worker image ($DOME_WORKER_IMAGE or --image; built
             with ops/container/build.sh when neither is given);
- ray:       RayExecutor on a local Ray, the attempt's files on this host's disk;
- ray-tls:   RayExecutor as for other hosts (--gateway-bind 127.0.0.1): the gateway over TLS through
             the node's relay, the base as a git bundle, the files carried by the task.

Printed per configuration: wall time per task and the coordinator process's CPU time per task
(time.process_time over the run: run loop, gateway, integration; for containers also the time
spent waiting on podman's CLI is wall, not CPU). Ray's own daemons run in other processes and
are not counted.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.invalid"}
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=env)


def _queue(tmp: Path, n: int, parallel: int) -> Path:
    repo = tmp / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("bench\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "init")
    tasks = [{"node_id": f"t{i:03d}", "containers": [], "required_capabilities": ["write"],
              "required_outputs": ["patch_proposal"], "dependencies": [],
              "action_spec": {"intent": "command", "argv": ["sh", "-c", f"echo {i} > f{i:03d}.txt"]}}
             for i in range(n)]
    q = {"artifact_kind": "dome.work.queue/v1", "repo": str(repo), "base_ref": "main", "determinism_seed": 1,
         "policy": "default", "promote_to": "refs/heads/dome/out", "tasks": tasks,
         "scheduling": {"max_parallel": parallel}, "validations": [{"suite": "command", "name": "tests", "argv": ["true"]}]}
    path = tmp / "work.queue.json"
    path.write_text(json.dumps(q))
    return path


def _run(kind: str, n: int, parallel: int, image: str | None) -> dict:
    from coordinator.executors.base import Limits
    from coordinator.keys import load_keyring, load_or_create_signing_key
    from coordinator.runloop.finish import integration_finish
    from coordinator.runloop.loop import RunContext, RunLoop
    from ledger import Ledger

    with tempfile.TemporaryDirectory(prefix="dome-bench-") as d:
        tmp = Path(d)
        q = _queue(tmp, n, parallel)
        ops = tmp / "ops"
        ops.mkdir()
        if kind == "local":
            from coordinator.executors.local import LocalExecutor
            ex = LocalExecutor(max_concurrency=parallel, limits=Limits())
        elif kind == "container":
            from coordinator.executors.container import ContainerExecutor
            ex = ContainerExecutor(image=image, max_concurrency=parallel, limits=Limits())
        else:
            from coordinator.executors.ray_executor import RayExecutor
            ex = RayExecutor(max_concurrency=parallel, limits=Limits(), resources={},
                             gateway_bind="127.0.0.1" if kind == "ray-tls" else None)
        ledger = Ledger.open(None, ops)
        ctx = RunContext(ledger=ledger, ops_root=ops, signer=load_or_create_signing_key(ops),
                         keyring=load_keyring(ops), executor=ex, executor_kind="ray" if kind.startswith("ray") else kind,
                         finish=integration_finish)
        cpu0, t0 = time.process_time(), time.perf_counter()
        out = RunLoop.start(q, ctx).run()
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        ledger.close()
    return {"executor": kind, "status": out.status, "tasks": n, "wall_s": round(wall, 2),
            "wall_per_task_ms": round(1000 * wall / n, 1), "coordinator_cpu_per_task_ms": round(1000 * cpu / n, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=12)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--image", default=os.environ.get("DOME_WORKER_IMAGE"))
    ap.add_argument("--only", default="local,container,ray,ray-tls")
    args = ap.parse_args()
    kinds = [k for k in args.only.split(",") if k]
    image = args.image
    if "container" in kinds and not image:
        image = subprocess.run(["bash", str(ROOT / "ops" / "container" / "build.sh")], check=True,
                               capture_output=True, text=True).stdout.strip().splitlines()[-1]
    if any(k.startswith("ray") for k in kinds):
        import ray
        ray.init(num_cpus=args.parallel, include_dashboard=False, log_to_driver=False, configure_logging=False,
                 object_store_memory=100 * 1024 * 1024)
    rows = [_run(k, args.tasks, args.parallel, image) for k in kinds]
    base = rows[0]
    print(f"{'executor':<10} {'status':<9} {'wall/task ms':>13} {'x base':>7} {'coord CPU/task ms':>18}")
    for r in rows:
        print(f"{r['executor']:<10} {r['status']:<9} {r['wall_per_task_ms']:>13} "
              f"{r['wall_per_task_ms'] / base['wall_per_task_ms']:>7.2f} {r['coordinator_cpu_per_task_ms']:>18}")
    print(json.dumps(rows))
    return 0 if all(r["status"] in ("promoted", "completed") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
