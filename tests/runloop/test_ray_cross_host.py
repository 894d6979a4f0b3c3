"""Ray workers on another host, for real: a Ray node in its own network namespace (a veth into a
bridge on the coordinator's side; tests/runloop/ray_netns.py) and its own mount namespace, where the coordinator's files do not exist.

The coordinator's host runs the Ray head without the node's custom resource, so every attempt of
the queue runs on the other node. The gateway is reached only over TCP with TLS (the run's own
certificate, pinned by the node's relay), the base arrives as a git bundle, and the run is
promoted and verifies. Ray's token authentication is on: a coordinator with another token is
refused with RAY_AUTH_REFUSED. Needs root (ip netns, unshare, mount), Ray and bubblewrap.
"""
from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests.attacks import attack
from tests.conftest import REPO_ROOT, dome_cli
from tests.runloop.conftest import cmd_task, write_queue
from tests.runloop.ray_netns import can_run, ray_cluster

RESOURCE = "dome_remote_host"

pytestmark = [pytest.mark.slow, pytest.mark.skipif(can_run() is not None, reason=str(can_run()))]

PROBE = r"""
import glob, json, os, sys, ray
ray.init(log_to_driver=False)
@ray.remote(num_cpus=1, resources={sys.argv[1]: 1})
def probe(paths):
    import os, ray
    return {"ip": ray.util.get_node_ip_address(), "seen": {p: os.path.exists(p) for p in paths}}
print(json.dumps(ray.get(probe.remote(sys.argv[2:]), timeout=120)))
"""

@pytest.fixture(scope="module")
def cluster():
    with ray_cluster(RESOURCE, nodes=1) as c:
        yield c


@pytest.mark.timeout(900)
@attack("remote-node-reads-coordinator")
def test_queue_on_a_node_in_another_namespace_is_promoted_and_the_node_sees_no_coordinator_file(
        cluster, git_repo, tmp_path):
    ops = tmp_path / "ops"
    tasks = [cmd_task("one", "echo 1 > one.txt"), cmd_task("two", "cat one.txt > two.txt; echo 2 >> two.txt", ["one"]),
             cmd_task("three", "echo 3 > three.txt")]
    q = write_queue(tmp_path, git_repo, tasks, scheduling={"max_parallel": 2})
    env = {**cluster["env"], "DOME_RAY_RESOURCES": json.dumps({RESOURCE: 1})}
    r = dome_cli("run", str(q), "--ops-root", str(ops), "--executor", "ray", "--gateway-bind", cluster["head_ip"],
                 "--json", env=env, timeout=600)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == "promoted", r.stdout[-3000:] + r.stderr[-3000:]
    v = dome_cli("verify", out["run_id"], "--ops-root", str(ops), "--repo", str(git_repo), timeout=300)
    assert v.returncode == 0, v.stdout + v.stderr
    two = subprocess.run(["git", "show", "refs/heads/dome/out:two.txt"], cwd=git_repo, capture_output=True,
                         text=True, check=True).stdout
    assert two == "1\n2\n"  # `two` ran on the bundle of the base derived from `one`'s proposal
    events = [json.loads(p.read_text()) for p in (ops / "runs" / out["run_id"] / "events").glob("event.*.json")]
    assert {e["payload"]["executor"] for e in events if e["topic"] == "task.dispatched"} == {"ray"}
    # a worker on that node looking for the coordinator's files finds nothing
    paths = [str(ops), str(ops / "keys"), str(git_repo), str(tmp_path), str(REPO_ROOT / "coordinator")]
    assert all(Path(p).exists() for p in paths)  # they are all there on the coordinator's side
    pr = subprocess.run([sys.executable, "-c", PROBE, RESOURCE, *paths], env=cluster["env"], capture_output=True,
                        text=True, timeout=300)
    assert pr.returncode == 0, pr.stderr[-3000:]
    seen = json.loads(pr.stdout.strip().splitlines()[-1])
    assert seen["ip"] == cluster["node_ip"]
    assert seen["seen"] == {p: False for p in paths}


@pytest.mark.timeout(300)
def test_a_cluster_refusing_the_token_is_a_clear_error(cluster, git_repo, tmp_path):
    q = write_queue(tmp_path, git_repo, [cmd_task("one", "echo 1 > one.txt")])
    env = {**cluster["env"], "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    r = dome_cli("run", str(q), "--ops-root", str(tmp_path / "ops"), "--executor", "ray", "--gateway-bind",
                 cluster["head_ip"], "--json", env=env, timeout=240)
    assert r.returncode == 3, r.stdout[-2000:] + r.stderr[-2000:]
    err = json.loads(r.stdout.strip().splitlines()[-1])["error"]
    assert err["code"] == "RAY_AUTH_REFUSED" and cluster["address"] in err["message"]
    assert any("RAY_AUTH_TOKEN" in h for h in err["hints"])
