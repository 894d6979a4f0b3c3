"""A Ray cluster whose worker nodes are other hosts, for real, on one machine: each node in its own
network namespace (a veth into a bridge that holds the head's address) and its own mount
namespace, where the coordinator's files do not exist. The head runs on the coordinator's host
without the nodes' custom resource, so work that asks for it runs on the nodes only.

Used by the cross-host test (one node) and by benchmarks/ray_tiles.py (one node, then two).
Needs root (ip netns, unshare, mount) and Ray.
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

REPO_ROOT = Path(__file__).resolve().parents[2]

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
exec ray start --address "$HEAD" --node-ip-address "$NODE_IP" --num-cpus "$NODE_CPUS" \
  --resources "{\"$RESOURCE\": $NODE_SLOTS}" --object-store-memory 100000000 --disable-usage-stats --block
"""

WAIT = r"""
import sys, time, ray
ray.init(log_to_driver=False)
deadline = time.time() + 180
want = float(sys.argv[2])
while time.time() < deadline and ray.cluster_resources().get(sys.argv[1], 0) < want:
    time.sleep(1)
sys.exit(0 if ray.cluster_resources().get(sys.argv[1], 0) >= want else 1)
"""


def can_run() -> str | None:
    """None when this machine can build the cluster, else why not."""
    from coordinator.executors.sandbox import probe_bwrap

    if os.geteuid() != 0:
        return "needs root (ip netns, unshare, mount)"
    for tool in ("ip", "unshare", "ray"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not probe_bwrap()[0]:
        return "bubblewrap cannot create namespaces here"
    return None


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


@contextmanager
def ray_cluster(resource: str, nodes: int = 1, node_cpus: int = 2, node_slots: int = 2,
                head_cpus: int = 1) -> Iterator[dict]:
    """Start a head and `nodes` worker nodes (each `node_cpus` CPUs and `node_slots` of `resource`);
    yields {address, head_ip, node_ips, env (the driver's: token and RAY_ADDRESS), logs}; tears
    everything down on exit."""
    n = os.getpid() % 100000
    x = 100 + os.getpid() % 100
    br = f"dbr{n}"
    head_ip = f"10.231.{x}.1"
    token = secrets.token_hex(16)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    env.pop("RAY_ADDRESS", None)
    temp = Path(tempfile.mkdtemp(prefix="dr"))  # short: Ray's socket paths live below it
    procs: list[subprocess.Popen] = []
    logs = temp / "logs"
    logs.mkdir()
    made: list[tuple[str, str]] = []
    try:
        _sh("ip", "link", "add", br, "type", "bridge")
        _sh("ip", "addr", "add", f"{head_ip}/24", "dev", br)
        _sh("ip", "link", "set", br, "up")
        node_ips = []
        for i in range(nodes):
            ns, va, vb = f"dn{n}x{i}", f"dva{n}x{i}", f"dvb{n}x{i}"
            node_ip = f"10.231.{x}.{2 + i}"
            _sh("ip", "netns", "add", ns)
            made.append((ns, va))
            _sh("ip", "link", "add", va, "type", "veth", "peer", "name", vb)
            _sh("ip", "link", "set", va, "master", br)
            _sh("ip", "link", "set", va, "up")
            _sh("ip", "link", "set", vb, "netns", ns)
            _sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{node_ip}/24", "dev", vb)
            _sh("ip", "netns", "exec", ns, "ip", "link", "set", vb, "up")
            _sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            node_ips.append(node_ip)
        with socket.socket() as s:
            s.bind((head_ip, 0))
            port = s.getsockname()[1]
        head = f"{head_ip}:{port}"
        procs.append(subprocess.Popen(
            ["ray", "start", "--head", "--block", "--node-ip-address", head_ip, "--port", str(port), "--num-cpus",
             str(head_cpus), "--object-store-memory", "100000000", "--include-dashboard", "false",
             "--disable-usage-stats", "--temp-dir", str(temp / "ray")], env=env,
            stdout=open(logs / "head.log", "wb"), stderr=subprocess.STDOUT, start_new_session=True))
        hide = " ".join(sorted({str(REPO_ROOT)} - {"/"}))
        for i, node_ip in enumerate(node_ips):
            procs.append(subprocess.Popen(
                ["ip", "netns", "exec", made[i][0], "unshare", "--mount", "bash", "-c", NODE_SCRIPT],
                env={**env, "DOME_SRC": str(REPO_ROOT), "HIDE": hide, "HEAD": head, "NODE_IP": node_ip,
                     "RESOURCE": resource, "NODE_CPUS": str(node_cpus), "NODE_SLOTS": str(node_slots)},
                stdout=open(logs / f"node{i}.log", "wb"), stderr=subprocess.STDOUT, start_new_session=True))
        drv = {**env, "RAY_ADDRESS": head}
        time.sleep(3)
        w = subprocess.run([sys.executable, "-c", WAIT, resource, str(nodes * node_slots)], env=drv,
                           capture_output=True, text=True, timeout=300)
        if w.returncode != 0:
            tails = "".join(p.read_text(errors="replace")[-2000:] for p in sorted(logs.glob("*.log")))
            raise RuntimeError(f"the Ray cluster did not come up: {tails}{w.stderr[-2000:]}")
        yield {"address": head, "head_ip": head_ip, "node_ips": node_ips, "node_ip": node_ips[0], "env": drv,
               "logs": logs}
    finally:
        for p in reversed(procs):
            _stop(p)
        for ns, va in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=60)
            subprocess.run(["ip", "link", "del", va], capture_output=True, timeout=60)
        subprocess.run(["ip", "link", "del", br], capture_output=True, timeout=60)
        shutil.rmtree(temp, ignore_errors=True)
