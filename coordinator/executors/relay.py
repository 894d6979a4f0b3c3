"""The gateway relay on a worker's node: Unix sockets in, TLS to the pinned gateway out.

A worker on another host still runs in its sandbox with no network: the only
ways out are Unix sockets bound in at /dome/gateway.sock and (when the run
serves agents) /dome/egress.sock, as on the coordinator's host. Here those
sockets belong to this relay, which forwards each connection's bytes to the
coordinator's TLS listener over TCP and accepts the peer only when its
certificate is exactly the one the coordinator made for this run (SHA-256
fingerprint pinned, name `dome-gateway`). Connections to the egress socket
ask for the ALPN protocol `dome-egress` and are refused unless the
coordinator agrees to it, so model calls reach the egress gate and nothing
else. The relay holds no credential: every call still carries its grant and
proof of possession, which the gateway or the egress gate checks (and the
egress gate meters).
"""
from __future__ import annotations

import os
import socket
import ssl
import threading
from pathlib import Path

from registry.errors import DomeError

from ..gateway.tls import EGRESS_ALPN, GATEWAY_NAME, fingerprint, pipe, serve_connections


class GatewayCertificateMismatch(DomeError):
    code = "GATEWAY_CERTIFICATE_MISMATCH"


class GatewayServiceUnavailable(DomeError):
    code = "GATEWAY_SERVICE_UNAVAILABLE"


def pinned_connect(host: str, port: int, cert_pem: bytes, *, timeout: float = 30.0,
                   service: str | None = None) -> ssl.SSLSocket:
    """A TLS connection to the gateway whose certificate must be exactly `cert_pem`; with
    `service` (an ALPN protocol such as `dome-egress`), to that service of the listener."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_verify_locations(cadata=cert_pem.decode("ascii"))
    if service is not None:
        ctx.set_alpn_protocols([service])
    raw = socket.create_connection((host, port), timeout=timeout)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a request's header and body records go out at once
    try:
        tls = ctx.wrap_socket(raw, server_hostname=GATEWAY_NAME)
    except ssl.SSLError as exc:
        raw.close()
        raise GatewayCertificateMismatch(f"the gateway at {host}:{port} is not the pinned one: {exc}",
                                         details={"host": host, "port": port}) from None
    peer = tls.getpeercert(binary_form=True) or b""
    got = fingerprint(ssl.DER_cert_to_PEM_cert(peer).encode("ascii")) if peer else ""
    if got != fingerprint(cert_pem):
        tls.close()
        raise GatewayCertificateMismatch("the gateway's certificate is not the pinned one",
                                         details={"expected": fingerprint(cert_pem), "got": got})
    if service is not None and tls.selected_alpn_protocol() != service:
        tls.close()
        raise GatewayServiceUnavailable(f"the coordinator at {host}:{port} does not serve {service}",
                                        details={"host": host, "port": port, "service": service})
    tls.settimeout(None)  # a call may take long; the worker's client has its own timeout
    return tls


class Relay:
    """One listener per Unix socket: `socket_path` to the gateway, `egress_path` (when given)
    to the egress gate; both to the same pinned TLS listener."""

    def __init__(self, socket_path: Path, host: str, port: int, cert_pem: bytes, *,
                 egress_path: Path | None = None) -> None:
        self.socket_path = Path(socket_path)
        self.egress_path = Path(egress_path) if egress_path is not None else None
        self.host, self.port, self.cert_pem = host, port, cert_pem
        self.errors: list[str] = []
        self._srvs: list[socket.socket] = []
        self._stop = threading.Event()

    def start(self) -> None:
        self._listen(self.socket_path, None)
        if self.egress_path is not None:
            self._listen(self.egress_path, EGRESS_ALPN)

    def _listen(self, path: Path, service: str | None) -> None:
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(str(path))
        os.chmod(path, 0o666)
        srv.listen(16)
        srv.settimeout(0.5)
        self._srvs.append(srv)
        threading.Thread(target=serve_connections, args=(srv, self._stop, lambda c: self._serve(c, service)),
                         name=f"dome-relay-{service or 'gateway'}", daemon=True).start()

    def _serve(self, conn: socket.socket, service: str | None = None) -> None:
        try:
            up = pinned_connect(self.host, self.port, self.cert_pem, service=service)
        except (DomeError, OSError) as exc:
            self.errors.append(str(exc))
            conn.close()
            return
        conn.setblocking(True)
        try:
            pipe(conn, up)
        finally:
            conn.close()
            up.close()

    def stop(self) -> None:
        self._stop.set()
        for srv in self._srvs:
            srv.close()
        self.socket_path.unlink(missing_ok=True)
        if self.egress_path is not None:
            self.egress_path.unlink(missing_ok=True)
