"""A worker's gateway call from another host, beside the same call on the coordinator's host.

    python benchmarks/gateway_tls.py [--calls 200] [--json]

One real gateway (MCP over HTTP on its Unix socket, grants, the ledger) and one attempt's
grant. The worker's own client (worker_sdk.client.GatewayClient) calls `report_progress`
(1) on the gateway's Unix socket, as a worker on the coordinator's host does, and (2) on a
node relay's Unix socket: the relay over TCP with TLS (the run's certificate pinned) to the
coordinator's TLS listener, and on to the same gateway. All on loopback, so the figure is
what the relay and TLS add, not a network's round trip. Rounds are interleaved so the shared
machine's load hits both alike.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from coordinator import runstate as rs
    from coordinator.executors.relay import Relay
    from coordinator.gateway import auth as grants_io
    from coordinator.gateway.dispatch import ToolDispatcher
    from coordinator.gateway.server import WorkerGateway
    from coordinator.gateway.tls import TlsFront, make_certificate
    from coordinator.gateway.worker_tools import GatewayBackend, build_tools
    from coordinator.grants import GrantVerifier
    from coordinator.keys import load_keyring, load_or_create_signing_key
    from coordinator.runloop.writer import LedgerWriter, WriterLedger
    from coordinator.runstate import RunState
    from ledger import Ledger
    from registry.signing import SigningKey
    from worker_sdk.client import GatewayClient

    work = Path(tempfile.mkdtemp(prefix="dome-gwtls-bench-"))
    (work / "ops").mkdir()
    (work / "cert").mkdir()
    ledger = Ledger.open(None, work / "ops")
    signer = load_or_create_signing_key(work / "ops")
    run = "bench"
    writer = LedgerWriter(ledger, run, signer, RunState())
    writer.append(rs.RUN_STARTED, {"base_ref": "a" * 40})
    neid, node = "ne-bench", "n1"
    attempts = {neid: {"node_id": node, "wave_id": "w1", "base_ref": "a" * 40, "base_tree_hash": "b" * 40,
                       "task": {"node_id": node}}}
    verifier = GrantVerifier(load_keyring(work / "ops"), WriterLedger(writer))
    backend = GatewayBackend(run_id=run, writer=writer, blobs=ledger.blobs, attempt=attempts.get)
    gw = WorkerGateway(run_id=run, verifier=verifier, dispatcher=ToolDispatcher(build_tools(backend)),
                       socket_path=work / "gw.sock", attempt=attempts.get)
    gw.start()
    writer.append(rs.TASK_DISPATCHED, {"node_execution_id": neid}, node_id=node, node_execution_id=neid)
    wk = SigningKey.generate()
    g, issued = grants_io.issue(key=signer, run_id=run, wave_id="w1", node_id=node, node_execution_id=neid,
                                capabilities=["write"], ttl_s=3600, policy_id="default", seed=1,
                                inputs_hash="sha256:" + "0" * 64, worker_public_key=wk.public.raw)
    writer.append("grant.issued", issued, node_id=node, node_execution_id=neid)
    verifier.bind_call_key(g.jti, wk)  # as the run loop does at attempt start
    cert = make_certificate(work / "cert", ["127.0.0.1"])
    front = TlsFront("127.0.0.1", 0, cert, work / "gw.sock")
    host, port = front.start()
    relay = Relay(work / "node-gw.sock", host, port, cert.cert_pem)
    relay.start()
    local = GatewayClient(token=g.token, profile=dict(g.payload), socket=str(work / "gw.sock"), worker_key=wk)
    remote = GatewayClient(token=g.token, profile=dict(g.payload), socket=str(work / "node-gw.sock"), worker_key=wk)

    def timed(client: GatewayClient, n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            client.report_progress(0.5, "bench")
            out.append((time.perf_counter() - t0) * 1000)
        return out

    try:
        timed(local, 10)
        timed(remote, 10)
        lo, re_ = [], []
        for _ in range(4):
            lo += timed(local, args.calls // 4)
            re_ += timed(remote, args.calls // 4)
    finally:
        relay.stop()
        front.stop()
        gw.stop()
        ledger.close()

    from egress_latency import latency_stats  # this script's own folder is on sys.path

    res = {"calls": len(lo), "local_unix_socket": latency_stats(lo), "relay_and_tls": latency_stats(re_),
           "load": os.getloadavg()[0]}
    if args.json:
        print(json.dumps(res))
    else:
        print(f"report_progress on the gateway's Unix socket: p50 {res['local_unix_socket']['p50_ms']} ms, "
              f"p90 {res['local_unix_socket']['p90_ms']} ms; through a node relay and the TLS listener: "
              f"p50 {res['relay_and_tls']['p50_ms']} ms, p90 {res['relay_and_tls']['p90_ms']} ms "
              f"({res['calls']} calls each, load {res['load']:.1f})")


if __name__ == "__main__":
    main()
