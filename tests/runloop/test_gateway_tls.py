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
                data = c.recv(1024)
                c.sendall(b"echo:" + data)
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
    for bad in ("", "a:b", "1.2.3.4:99999", "a b"):
        with pytest.raises(GatewayBindInvalid):
            parse_bind(bad)
