"""Ray workers on another host, for real: a Ray node in its own network namespace (a veth pair to
the coordinator's) and its own mount namespace, where the coordinator's files do not exist.

The coordinator's host runs the Ray head without the node's custom resource, so every attempt of
the queue runs on the other node. The gateway is reached only over TCP with TLS (the run's own
certificate, pinned by the node's relay), the base arrives as a git bundle, and the run is
promoted and verifies. Ray's token authentication is on: a coordinator with another token is
refused with RAY_AUTH_REFUSED. Needs root (ip netns, unshare, mount), Ray and bubblewrap.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from coordinator.executors.sandbox import probe_bwrap
from tests.attacks import attack
from tests.conftest import REPO_ROOT, dome_cli
from tests.runloop.conftest import cmd_task, write_queue

RESOURCE = "dome_remote_host"


def _can_run() -> str | None:
    if os.geteuid() != 0:
        return "needs root (ip netns, unshare, mount)"
    for tool in ("ip", "unshare", "ray"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not probe_bwrap()[0]:
        return "bubblewrap cannot create namespaces here"
    return None


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_can_run() is not None, reason=str(_can_run()))]

# Runs inside `ip netns exec NS unshare --mount`: the node gets its own copy of dome's packages (as an
# installation on another host would), then the coordinator's files are covered before Ray starts.
NODE_SCRIPT = r"""
set -euo pipefail
mount --make-rprivate /
mount -t tmpfs tmpfs /mnt
mkdir -p /mnt/dome
for p in registry worker_sdk coordinator ledger; do cp -r "$DOME_SRC/$p" /mnt/dome/; done
mount -t tmpfs tmpfs /tmp
for d in $HIDE; do if [ -d "$d" ]; then mount -t tmpfs tmpfs "$d"; fi; done  # a path below /tmp is hidden already
export PYTHONPATH=/mnt/dome
cd /mnt
exec ray start --address "$HEAD" --node-ip-address "$NODE_IP" --num-cpus 2 \
  --resources "{\"$RESOURCE\": 2}" --object-store-memory 100000000 --disable-usage-stats --block
"""

PROBE = r"""
import glob, json, os, sys, ray
ray.init(log_to_driver=False)
@ray.remote(num_cpus=1, resources={sys.argv[1]: 1})
def probe(paths):
    import os, ray
    return {"ip": ray.util.get_node_ip_address(), "seen": {p: os.path.exists(p) for p in paths}}
print(json.dumps(ray.get(probe.remote(sys.argv[2:]), timeout=120)))
"""

WAIT = r"""
import sys, time, ray
ray.init(log_to_driver=False)
deadline = time.time() + 120
while time.time() < deadline and not ray.cluster_resources().get(sys.argv[1]):
    time.sleep(1)
sys.exit(0 if ray.cluster_resources().get(sys.argv[1]) else 1)
"""


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


def _stop(p: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(15)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def cluster():
    n = os.getpid() % 100000
    x = 100 + os.getpid() % 100
    ns, va, vb = f"dn{n}", f"dva{n}", f"dvb{n}"
    head_ip, node_ip = f"10.231.{x}.1", f"10.231.{x}.2"
    token = secrets.token_hex(16)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    env.pop("RAY_ADDRESS", None)
    temp = Path(tempfile.mkdtemp(prefix="dr"))  # short: Ray's socket paths live below it
    procs: list[subprocess.Popen] = []
    logs = temp / "logs"
    logs.mkdir()
    try:
        _sh("ip", "netns", "add", ns)
        _sh("ip", "link", "add", va, "type", "veth", "peer", "name", vb)
        _sh("ip", "link", "set", vb, "netns", ns)
        _sh("ip", "addr", "add", f"{head_ip}/24", "dev", va)
        _sh("ip", "link", "set", va, "up")
        _sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{node_ip}/24", "dev", vb)
        _sh("ip", "netns", "exec", ns, "ip", "link", "set", vb, "up")
        _sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        with socket.socket() as s:
            s.bind((head_ip, 0))
            port = s.getsockname()[1]
        head = f"{head_ip}:{port}"
        procs.append(subprocess.Popen(
            ["ray", "start", "--head", "--block", "--node-ip-address", head_ip, "--port", str(port), "--num-cpus", "1",
             "--object-store-memory", "100000000", "--include-dashboard", "false", "--disable-usage-stats",
             "--temp-dir", str(temp / "ray")], env=env, stdout=open(logs / "head.log", "wb"),
            stderr=subprocess.STDOUT, start_new_session=True))
        hide = " ".join(sorted({str(REPO_ROOT)} - {"/"}))
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", ns, "unshare", "--mount", "bash", "-c", NODE_SCRIPT],
            env={**env, "DOME_SRC": str(REPO_ROOT), "HIDE": hide, "HEAD": head, "NODE_IP": node_ip,
                 "RESOURCE": RESOURCE}, stdout=open(logs / "node.log", "wb"), stderr=subprocess.STDOUT,
            start_new_session=True))
        drv = {**env, "RAY_ADDRESS": head}
        time.sleep(3)
        w = subprocess.run([sys.executable, "-c", WAIT, RESOURCE], env=drv, capture_output=True, text=True,
                           timeout=300)
        assert w.returncode == 0, ((logs / "head.log").read_text()[-2000:] + (logs / "node.log").read_text()[-2000:]
                                   + w.stderr[-2000:])
        yield {"address": head, "head_ip": head_ip, "node_ip": node_ip, "env": drv}
    finally:
        for p in reversed(procs):
            _stop(p)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=60)
        subprocess.run(["ip", "link", "del", va], capture_output=True, timeout=60)
        shutil.rmtree(temp, ignore_errors=True)


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
