"""The gateway over TCP with TLS for workers on other hosts: a front on the coordinator, a relay on
the worker's node that pins the run's certificate. Real sockets, real TLS, a real gateway."""
from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from coordinator.executors.ray_executor import GatewayBindInvalid, parse_bind
from coordinator.executors.relay import GatewayCertificateMismatch, Relay, pinned_connect
from coordinator.gateway.tls import TlsFront, fingerprint, make_certificate
from tests.attacks import attack
from tests.runloop.test_gateway import gateway  # noqa: F401 - the real gateway fixture


def _echo_server(path: Path) -> socket.socket:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(4)

    def serve() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            with c:
                try:
                    c.sendall(b"echo:" + c.recv(1024))
                except OSError:  # the client left first (it refused the listener's answer)
                    pass
    threading.Thread(target=serve, daemon=True).start()
    return srv


def _through_relay(relay_sock: Path, msg: bytes) -> bytes:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(10)
    c.connect(str(relay_sock))
    c.sendall(msg)
    got = b""
    try:
        while True:
            part = c.recv(1024)
            if not part:
                break
            got += part
    except ConnectionResetError:  # the relay closed without reading: it refused the gateway
        pass
    c.close()
    return got


@attack("gateway-impersonation")
def test_relay_reaches_the_gateway_only_through_its_pinned_certificate(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    cert = make_certificate(tmp_path / "a", ["127.0.0.1"])
    other = make_certificate(tmp_path / "b", ["127.0.0.1"])
    assert (tmp_path / "a" / "gateway.key").stat().st_mode & 0o777 == 0o600
    assert fingerprint(cert.cert_pem) != fingerprint(other.cert_pem)
    srv = _echo_server(tmp_path / "gw.sock")
    front = TlsFront("127.0.0.1", 0, cert, tmp_path / "gw.sock")
    host, port = front.start()
    try:
        good = Relay(tmp_path / "good.sock", host, port, cert.cert_pem)
        good.start()
        assert _through_relay(tmp_path / "good.sock", b"hello") == b"echo:hello"
        good.stop()
        # a relay pinned to another certificate (a gateway impersonated, or another run's) refuses
        with pytest.raises(GatewayCertificateMismatch):
            pinned_connect(host, port, other.cert_pem, timeout=5)
        bad = Relay(tmp_path / "bad.sock", host, port, other.cert_pem)
        bad.start()
        assert _through_relay(tmp_path / "bad.sock", b"hello") == b""
        assert bad.errors and "not the pinned one" in bad.errors[0]
        bad.stop()
        # plain TCP without TLS gets nothing from the gateway
        raw = socket.create_connection((host, port), timeout=5)
        raw.sendall(b"POST /mcp HTTP/1.1\r\nHost: dome-gateway\r\n\r\n")
        raw.settimeout(5)
        try:
            assert b"echo" not in raw.recv(1024)
        except (ConnectionError, socket.timeout):
            pass
        raw.close()
    finally:
        front.stop()
        srv.close()


def test_gateway_bind_is_host_and_optional_port():
    assert parse_bind("10.0.0.1:7000") == ("10.0.0.1", 7000)
    assert parse_bind("10.0.0.1") == ("10.0.0.1", 0)
    assert parse_bind("[fd00::1]:9") == ("fd00::1", 9)
    for bad in ("", "a:b", "1.2.3.4:99999", "a b", "0.0.0.0:7000", "[::]"):
        with pytest.raises(GatewayBindInvalid):
            parse_bind(bad)




@attack("remote-grant-replay")
def test_calls_over_tls_are_still_authorised_by_grant_and_proof(gateway, tmp_path):  # noqa: F811
    """Through the TLS front and a node's relay, a granted call with its proof passes; the same token
    without the attempt's key (a stolen grant), or a forged token, is refused by the gateway."""
    from registry.errors import DomeError
    from worker_sdk.client import GatewayClient

    gw, _, _, attempt, _ = gateway
    (tmp_path / "c").mkdir()
    cert = make_certificate(tmp_path / "c", ["127.0.0.1"])
    front = TlsFront("127.0.0.1", 0, cert, gw.socket_path)
    host, port = front.start()
    relay = Relay(tmp_path / "relay.sock", host, port, cert.cert_pem)
    relay.start()
    try:
        g = attempt("ne-tls1")
        ok = GatewayClient(token=g.token, profile=g.profile, socket=str(tmp_path / "relay.sock"), worker_key=g.key)
        assert ok.report_progress(0.5, "over tls") is not None  # answered, not refused
        stolen = GatewayClient(token=g.token, profile={k: v for k, v in g.profile.items() if k != "cnf"},
                               socket=str(tmp_path / "relay.sock"))
        with pytest.raises(DomeError) as err:
            stolen.report_progress(0.6, "no proof")
        assert "PROOF" in err.value.code or "GRANT" in err.value.code, err.value.code
        forged = GatewayClient(token=g.token[:-4] + "AAAA", profile=g.profile, socket=str(tmp_path / "relay.sock"),
                               worker_key=g.key)
        with pytest.raises(DomeError):
            forged.report_progress(0.7, "forged")
    finally:
        relay.stop()
        front.stop()


@pytest.mark.parametrize("argv, code", [
    (["--executor", "local", "--gateway-bind", "127.0.0.1"], "GATEWAY_BIND_INVALID"),
    (["--executor", "ray", "--gateway-bind", "0.0.0.0"], "GATEWAY_BIND_INVALID"),
    (["--executor", "ray", "--gateway-bind", "host:port"], "GATEWAY_BIND_INVALID"),
    (["--executor", "local", "--image", "w@sha256:" + "a" * 64], "RAY_IMAGE_INVALID"),
])
def test_executor_options_are_refused_before_anything_is_created(git_repo, tmp_path, argv, code):
    import json

    from tests.conftest import dome_cli
    from tests.runloop.conftest import cmd_task, write_queue

    q = write_queue(tmp_path, git_repo, [cmd_task("one", "echo 1 > one.txt")])
    ops = tmp_path / "ops"
    r = dome_cli("run", str(q), "--ops-root", str(ops), *argv, "--json", timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["error"]["code"] == code
    assert not ops.exists()
