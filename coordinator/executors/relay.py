"""The gateway relay on a worker's node: a Unix socket in, TLS to the pinned gateway out.

A worker on another host still runs in its sandbox with no network: the only
way out is a Unix socket bound in at /dome/gateway.sock, as on the
coordinator's host. Here that socket belongs to this relay, which forwards
each connection's bytes to the coordinator's gateway over TCP with TLS and
accepts the gateway only when its certificate is exactly the one the
coordinator made for this run (SHA-256 fingerprint pinned, name
`dome-gateway`). The relay holds no credential: every call still carries
its grant and proof of possession, which the gateway checks.
"""
from __future__ import annotations

import os
import socket
import ssl
import threading
from pathlib import Path

from registry.errors import DomeError

from ..gateway.tls import GATEWAY_NAME, fingerprint, pipe, serve_connections



class GatewayCertificateMismatch(DomeError):
    code = "GATEWAY_CERTIFICATE_MISMATCH"


def pinned_connect(host: str, port: int, cert_pem: bytes, *, timeout: float = 30.0) -> ssl.SSLSocket:
    """A TLS connection to the gateway whose certificate must be exactly `cert_pem`."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_verify_locations(cadata=cert_pem.decode("ascii"))
    raw = socket.create_connection((host, port), timeout=timeout)
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
    tls.settimeout(None)  # a call may take long; the worker's client has its own timeout
    return tls


class Relay:
    def __init__(self, socket_path: Path, host: str, port: int, cert_pem: bytes) -> None:
        self.socket_path = Path(socket_path)
        self.host, self.port, self.cert_pem = host, port, cert_pem
        self.errors: list[str] = []
        self._srv: socket.socket | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(str(self.socket_path))
        os.chmod(self.socket_path, 0o666)
        srv.listen(16)
        srv.settimeout(0.5)
        self._srv = srv
        threading.Thread(target=self._accept, name="dome-relay", daemon=True).start()

    def _accept(self) -> None:
        assert self._srv is not None
        serve_connections(self._srv, self._stop, self._serve)

    def _serve(self, conn: socket.socket) -> None:
        try:
            up = pinned_connect(self.host, self.port, self.cert_pem)
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
        if self._srv is not None:
            self._srv.close()
        self.socket_path.unlink(missing_ok=True)
