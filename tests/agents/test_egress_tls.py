"""The egress gate over TCP with TLS, for agent workers on other hosts: the coordinator's TLS
listener passes connections that ask for `dome-egress` (ALPN) to the gate, a node's relay gives
the sandbox a second Unix socket pinned to the run's certificate. Real TLS, real grants and call
proofs, the real OpenAI SDK, the scripted endpoint on loopback, a real ledger."""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from coordinator.egress import metering as mt
from coordinator.executors.ray_executor import EgressNotServed, remote_egress
from coordinator.executors.relay import GatewayCertificateMismatch, GatewayServiceUnavailable, Relay, pinned_connect
from coordinator.gateway.tls import EGRESS_ALPN, GATEWAY_ALPN, TlsFront, make_certificate, upstream_for
from registry.errors import DomeError
from tests.agents.helpers import HOST, MODEL, card
from tests.agents.test_egress_gate import RUN, _chat, env, llm  # noqa: F401 - the real gate and endpoint
from tests.attacks import attack
from tests.runloop.test_gateway_tls import _echo_server
from worker_sdk.intents.agent import make_client


def _exchange(sock: socket.socket, data: bytes) -> bytes:
    sock.settimeout(10)
    sock.sendall(data)
    out = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionError, socket.timeout):
            break
        if not chunk:
            break
        out += chunk
    sock.close()
    return out


def _post(token: str | None, body: bytes) -> bytes:
    auth = b"Authorization: Bearer " + token.encode() + b"\r\n" if token is not None else b""
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: " + HOST.encode() + b"\r\n" + auth
            + b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)


@pytest.fixture
def front(env, tmp_path):  # noqa: F811
    (tmp_path / "cert").mkdir()
    cert = make_certificate(tmp_path / "cert", ["127.0.0.1"])
    gw = _echo_server(tmp_path / "gw.sock")
    tls = TlsFront("127.0.0.1", 0, cert, tmp_path / "gw.sock", services={EGRESS_ALPN: Path(env["sock"])})
    host, port = tls.start()
    relay = Relay(tmp_path / "node-gw.sock", host, port, cert.cert_pem, egress_path=tmp_path / "node-egress.sock")
    relay.start()
    yield {"host": host, "port": port, "cert": cert, "relay": relay, "egress": tmp_path / "node-egress.sock",
           "gateway": tmp_path / "node-gw.sock"}
    relay.stop()
    tls.stop()
    gw.close()


def test_an_agent_on_another_host_reaches_the_gate_through_the_relay_and_is_metered(env, front):  # noqa: F811
    gw = env["attempt"]("ne-remote")
    resp = _chat(make_client(card(), gw, str(front["egress"])))
    assert resp.choices[0].message.content == "hi"
    up = env["llm"].requests[-1]
    assert up["headers"]["authorization"] == f"Bearer {env['key']}"  # the coordinator's key, added by the gate
    calls = [e for e in env["ledger"].events(RUN) if e.topic == mt.CALL_TOPIC]
    assert len(calls) == 1 and calls[0].node_id == "agent-a" and calls[0].payload["model"] == MODEL
    assert env["ledger"].blobs.get(calls[0].payload["request_digest"]) == up["body"]
    # the relay's other socket still reaches the gateway, not the gate
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(str(front["gateway"]))
    assert _exchange(c, b"ping") == b"echo:ping"
    assert front["relay"].errors == []


@attack("remote-egress-without-grant")
def test_the_tls_egress_listener_refuses_calls_without_a_valid_grant(env, front):  # noqa: F811
    """Straight to the coordinator's TLS listener (pinned, ALPN dome-egress), as any process on a
    worker's node could: no grant, a forged grant, a real grant without its worker key's proof,
    all refused by the gate, recorded, and never forwarded to the model."""
    gw = env["attempt"]("ne-remote")
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "[script:chat] hi"}]}).encode()
    before = len(env["llm"].requests)
    seen = []
    for token in (None, gw.token[:-6] + "AAAAAA", gw.token):
        out = _exchange(pinned_connect(front["host"], front["port"], front["cert"].cert_pem, service=EGRESS_ALPN),
                        _post(token, body))
        assert out.startswith(b"HTTP/1.1 401"), out[:300]
        seen.append(json.loads(out.split(b"\r\n\r\n", 1)[1])["error"]["code"])
    assert seen[0] == "GRANT_MISSING" and seen[1].startswith("GRANT_") and seen[2] == "GRANT_PROOF_MISSING", seen
    assert len(env["llm"].requests) == before
    topics = [e.topic for e in env["ledger"].events(RUN)]
    assert mt.REFUSED_TOPIC in topics and "grant.rejected" in topics and mt.CALL_TOPIC not in topics
    # the listener is the run's: a client pinned to another certificate refuses it
    (front["egress"].parent / "cert-other").mkdir()
    other = make_certificate(front["egress"].parent / "cert-other", ["127.0.0.1"])
    with pytest.raises(GatewayCertificateMismatch):
        pinned_connect(front["host"], front["port"], other.cert_pem, timeout=5, service=EGRESS_ALPN)
    # a TLS connection that does not ask for the egress gate reaches the gateway, never the gate
    plain = pinned_connect(front["host"], front["port"], front["cert"].cert_pem)
    assert plain.selected_alpn_protocol() is None
    assert _exchange(plain, _post(gw.token, body)).startswith(b"echo:")
    assert len(env["llm"].requests) == before


def test_a_listener_without_the_egress_gate_is_refused_by_the_relay(tmp_path):
    (tmp_path / "cert").mkdir()
    cert = make_certificate(tmp_path / "cert", ["127.0.0.1"])
    gw = _echo_server(tmp_path / "gw.sock")
    tls = TlsFront("127.0.0.1", 0, cert, tmp_path / "gw.sock")  # a run with no egress configuration
    host, port = tls.start()
    relay = Relay(tmp_path / "r.sock", host, port, cert.cert_pem, egress_path=tmp_path / "e.sock")
    relay.start()
    try:
        with pytest.raises(GatewayServiceUnavailable) as exc:
            pinned_connect(host, port, cert.cert_pem, timeout=5, service=EGRESS_ALPN)
        assert exc.value.code == "GATEWAY_SERVICE_UNAVAILABLE"
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(str(tmp_path / "e.sock"))
        assert _exchange(c, b"POST / HTTP/1.1\r\n\r\n") == b""  # closed, nothing passed to the gateway
        assert relay.errors and "does not serve dome-egress" in relay.errors[0]
    finally:
        relay.stop()
        tls.stop()
        gw.close()


def test_upstream_is_chosen_by_the_negotiated_protocol():
    gw, eg = Path("/run/gw.sock"), Path("/run/eg.sock")
    assert upstream_for(None, gw, {EGRESS_ALPN: eg}) == gw
    assert upstream_for(GATEWAY_ALPN, gw, {EGRESS_ALPN: eg}) == gw
    assert upstream_for(EGRESS_ALPN, gw, {EGRESS_ALPN: eg}) == eg
    assert upstream_for(EGRESS_ALPN, gw, {}) is None


def test_remote_attempts_get_the_egress_socket_only_where_it_can_work():
    agent = {"node_id": "a", "action_spec": {"intent": "agent", "params": {}}}
    cmd = {"node_id": "c", "action_spec": {"intent": "cmd", "params": {}}}
    served, not_served = {"egress": True}, {"egress": False}
    assert remote_egress(agent, True, served) is True
    assert remote_egress(cmd, True, served) is True  # as on the coordinator's host: every attempt of the run
    assert remote_egress(cmd, False, not_served) is False
    assert remote_egress(cmd, True, not_served) is False  # a command needs no gate: it just gets no socket
    with pytest.raises(DomeError) as exc:  # an agent in a run with no egress configuration
        remote_egress(agent, False, served)
    assert exc.value.code == "EGRESS_NOT_CONFIGURED" and exc.value.details == {"node_id": "a"}
    with pytest.raises(EgressNotServed):  # a gate the TLS listener does not serve
        remote_egress(agent, True, not_served)


def test_the_relays_tls_connection_sends_each_record_at_once(front):
    """Nagle's algorithm off: a request's header and body records are not held back for the
    peer's delayed ACK (about 40 ms per call on Linux before)."""
    tls = pinned_connect(front["host"], front["port"], front["cert"].cert_pem, service=EGRESS_ALPN)
    try:
        assert tls.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        tls.close()
