"""Egress gate overhead per model call, beside the same call made directly, in the same run.

    python benchmarks/egress_latency.py [--calls 200] [--json]

A scripted OpenAI-compatible endpoint on loopback (examples/agent-swarm/scripted_llm.py)
answers at once, so what is measured is the path, not a model: the official OpenAI SDK
(1) straight to the endpoint over TCP, and (2) through the egress gate over its Unix
socket (grant and call-proof check, the reservation and the model.call event as two
durable ledger commits, request and reply stored as blobs, the key added, forwarded),
(3) the path of an agent CLI: the SDK asking for a stream from the in-sandbox
endpoint (worker_sdk/egress_shim.py) over loopback TCP, which sends the request to
the gate unstreamed and streams the whole reply back, and (4) the path of an agent
on another host: the SDK to a node relay's egress socket, the relay over TCP with
TLS (pinned certificate, ALPN dome-egress) to the coordinator's TLS listener, and on
to the same gate (here all on loopback: the figure is the relay and TLS, not a network).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def latency_stats(ms: list[float]) -> dict[str, float]:
    """p50 and p90 of call times in milliseconds (benchmarks/gateway_tls.py reports the same)."""
    xs = sorted(ms)
    return {"p50_ms": round(statistics.median(xs), 2), "p90_ms": round(xs[int(0.9 * len(xs)) - 1], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import importlib.util

    import openai

    from coordinator.egress.config import EgressConfig
    from coordinator.egress.gate import EgressGate, ledger_transact
    from coordinator.executors.relay import Relay
    from coordinator.gateway.tls import EGRESS_ALPN, TlsFront, make_certificate
    from coordinator.grants import GrantVerifier, issue_profile
    from coordinator.keys import load_keyring, load_or_create_signing_key
    from ledger import Ledger
    from registry.agent_card import grant_terms
    from registry.signing import SigningKey
    from worker_sdk.client import GatewayClient
    from worker_sdk.intents.agent import make_client

    spec = importlib.util.spec_from_file_location("scripted_llm", REPO / "examples" / "agent-swarm" / "scripted_llm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    host, model = "models.scripted.test", "scripted-1"
    card = {"runtime_id": "bench", "sdk": {"package": "openai", "version": openai.__version__}, "model": model,
            "endpoint": {"host": host, "base_path": "/v1"}, "allow_models": [model], "budgets": {"max_tokens": 10**12}}
    work = Path(tempfile.mkdtemp(prefix="dome-egress-bench-"))
    ops = work / "ops"
    ops.mkdir()
    llm = mod.ScriptedLLM({"chat": [{"content": "hi", "completion_tokens": 40}] * 4}).start()
    os.environ["DOME_BENCH_KEY"] = "sk-bench"
    ledger = Ledger.open(None, ops)
    signer = load_or_create_signing_key(ops)
    verifier = GrantVerifier(load_keyring(ops), ledger)
    gate = EgressGate(run_id="bench", verifier=verifier,
                      config=EgressConfig.parse({"routes": {host: {"upstream": f"http://127.0.0.1:{llm.port}",
                                                                   "key_env": "DOME_BENCH_KEY"}}}),
                      transact=ledger_transact(ledger), blobs=ledger.blobs, socket_path=work / "egress.sock")
    gate.start()
    wk = SigningKey.generate()
    g = issue_profile(key=signer, run_id="bench", wave_id="w", node_id="n", node_execution_id="ne",
                      required_capabilities=["write"], worker_public_key=wk.public.raw, egress=grant_terms(card))
    verifier.bind_call_key(g.jti, wk)  # as the run loop does at attempt start
    via = make_client(card, GatewayClient(token=g.token, profile=g.payload, socket="/unused", worker_key=wk),
                      str(work / "egress.sock"))
    direct = openai.OpenAI(api_key="k", base_url=f"http://127.0.0.1:{llm.port}/v1", max_retries=0)
    from worker_sdk.egress_shim import EgressShim
    shim = EgressShim(gateway=GatewayClient(token=g.token, profile=g.payload, socket="/unused", worker_key=wk),
                      host=host, socket=str(work / "egress.sock")).start()
    cli = openai.OpenAI(api_key="placeholder", base_url=f"http://127.0.0.1:{shim.port}/v1", max_retries=0)
    (work / "cert").mkdir()
    cert = make_certificate(work / "cert", ["127.0.0.1"])
    front = TlsFront("127.0.0.1", 0, cert, work / "gateway-unused.sock", services={EGRESS_ALPN: work / "egress.sock"})
    tls_host, tls_port = front.start()
    relay = Relay(work / "node-gw.sock", tls_host, tls_port, cert.cert_pem, egress_path=work / "node-egress.sock")
    relay.start()
    remote = make_client(card, GatewayClient(token=g.token, profile=g.payload, socket="/unused", worker_key=wk),
                         str(work / "node-egress.sock"))
    messages = [{"role": "user", "content": "[script:chat] hi"}]

    def timed(client, n: int, stream: bool = False) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            if stream:  # what an agent CLI asks for; every chunk is read
                for _chunk in client.chat.completions.create(model=model, messages=messages,
                                                             max_completion_tokens=100, stream=True):
                    pass
            else:
                client.chat.completions.create(model=model, messages=messages, max_completion_tokens=100)
            out.append((time.perf_counter() - t0) * 1000)
        return out

    try:
        timed(direct, 10)
        timed(via, 10)
        timed(cli, 10, stream=True)
        timed(remote, 10)
        d, v, c, r = [], [], [], []
        for _ in range(4):  # interleaved rounds: the shared machine's load hits all alike
            d += timed(direct, args.calls // 4)
            v += timed(via, args.calls // 4)
            c += timed(cli, args.calls // 4, stream=True)
            r += timed(remote, args.calls // 4)
        # every call through the gate, from either side, is one model.call event
        metered = sum(1 for e in ledger.events("bench") if e.topic == "model.call")
        assert metered == len(v) + len(c) + len(r) + 30, metered
    finally:
        relay.stop()
        front.stop()
        shim.stop()
        gate.stop()
        llm.stop()
        ledger.close()

    res = {"calls": len(v), "direct": latency_stats(d), "via_gate": latency_stats(v),
           "cli_via_shim_streamed": latency_stats(c), "via_relay_and_tls": latency_stats(r),
           "load": os.getloadavg()[0]}
    if args.json:
        print(json.dumps(res))
    else:
        print(f"direct: p50 {res['direct']['p50_ms']} ms, p90 {res['direct']['p90_ms']} ms; "
              f"via the egress gate: p50 {res['via_gate']['p50_ms']} ms, p90 {res['via_gate']['p90_ms']} ms; "
              f"an agent CLI's streamed call via the shim and the gate: p50 "
              f"{res['cli_via_shim_streamed']['p50_ms']} ms, p90 {res['cli_via_shim_streamed']['p90_ms']} ms; "
              f"from another host's relay over TLS to the gate: p50 {res['via_relay_and_tls']['p50_ms']} ms, "
              f"p90 {res['via_relay_and_tls']['p90_ms']} ms "
              f"({res['calls']} calls each, load {res['load']:.1f})")


if __name__ == "__main__":
    main()
