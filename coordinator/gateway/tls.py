"""The gateway over TCP with TLS, for workers on other hosts.

At run start the coordinator makes a fresh self-signed certificate (ECDSA
P-256, valid for the run's host names and addresses and for the name
`dome-gateway`) and a private key that never leaves the coordinator's run
directory. Workers are given the certificate itself and pin it: the relay on
the worker's node (coordinator/executors/relay.py) accepts only a peer whose
certificate has exactly this SHA-256 fingerprint. TLS protects the channel;
every call is still authorised by its grant and proof of possession.

`TlsFront` is the coordinator's TLS listener: it terminates TLS and passes
each connection's bytes to the gateway's own Unix socket, so the gateway
(one server, one MCP app) is the same for local and remote workers. The
same listener also serves the egress gate (agent workers' model calls):
a client that asks for the ALPN protocol `dome-egress` during the
handshake is passed to the egress gate's Unix socket instead, where each
request is authorised and metered exactly as for a local worker. A
connection that names no protocol (or `dome-gateway`) reaches the gateway.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import ipaddress
import os
import selectors
import socket
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

GATEWAY_NAME = "dome-gateway"  # the Host header and certificate name workers use
GATEWAY_ALPN = "dome-gateway"  # the TLS listener's services, chosen by ALPN in the handshake
EGRESS_ALPN = "dome-egress"
CHUNK = 65536


@dataclass(frozen=True)
class GatewayCertificate:
    cert_pem: bytes
    cert_path: Path
    key_path: Path

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.cert_pem)

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(str(self.cert_path), str(self.key_path))
        ctx.num_tickets = 0  # no session resumption: nothing arrives after the handshake but the replies
        return ctx


def fingerprint(cert_pem: bytes) -> str:
    """sha256:<hex> of the certificate's DER bytes."""
    der = ssl.PEM_cert_to_DER_cert(cert_pem.decode("ascii"))
    return "sha256:" + hashlib.sha256(der).hexdigest()


def make_certificate(directory: Path, hosts: list[str], *, days: int = 7) -> GatewayCertificate:
    """A fresh self-signed certificate and key in `directory` (key file 0600)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(GATEWAY_NAME)]
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    now = _dt.datetime.now(_dt.timezone.utc)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, GATEWAY_NAME)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _dt.timedelta(minutes=5)).not_valid_after(now + _dt.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256()))
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_path = directory / "gateway.key"
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    cert_path = directory / "gateway.crt"
    cert_path.write_bytes(cert_pem)
    return GatewayCertificate(cert_pem, cert_path, key_path)


def _recv(sock: socket.socket) -> bytes | None:
    """What is readable now: bytes, b"" at end of stream, None when nothing is (a TLS
    record that carried no application data, such as a session ticket)."""
    sock.setblocking(False)
    try:
        return sock.recv(CHUNK)
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
        return None
    finally:
        sock.setblocking(True)


def pipe(a: socket.socket, b: socket.socket, *, idle_s: float = 600) -> None:
    """Copy bytes both ways until either side closes (or nothing moves for idle_s)."""
    sel = selectors.DefaultSelector()
    sel.register(a, selectors.EVENT_READ, b)
    sel.register(b, selectors.EVENT_READ, a)
    try:
        while True:
            ready = sel.select(timeout=idle_s)
            if not ready:
                return
            for key, _ in ready:
                src, dst = key.fileobj, key.data
                while True:
                    data = _recv(src)
                    if data is None:
                        break
                    if not data:
                        return
                    dst.sendall(data)
                    if not (isinstance(src, ssl.SSLSocket) and src.pending()):
                        break
    except OSError:
        return
    finally:
        sel.close()


def serve_connections(srv: socket.socket, stop: threading.Event, serve: Callable[[socket.socket], None]) -> None:
    """Accept on `srv` (with a timeout set) until `stop` is set or the socket closes; each
    connection is served on its own daemon thread."""
    while not stop.is_set():
        try:
            conn, _ = srv.accept()
        except socket.timeout:
            continue
        except OSError:
            return
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def upstream_for(selected: str | None, default: Path, services: Mapping[str, Path]) -> Path | None:
    """Pure: the Unix socket a TLS connection is passed to, by the ALPN protocol it negotiated
    (none: the gateway; a protocol this listener does not serve: None, the connection is closed)."""
    if selected is None or selected == GATEWAY_ALPN:
        return default
    return services.get(selected)


class TlsFront:
    """TCP + TLS on (host, port) in front of the gateway's Unix socket, and of the other
    services in `services` (ALPN protocol -> Unix socket), such as the egress gate."""

    def __init__(self, host: str, port: int, certificate: GatewayCertificate, upstream: Path,
                 services: Mapping[str, Path] | None = None) -> None:
        self.host, self.port = host, port
        self.certificate, self.upstream = certificate, Path(upstream)
        self.services = {k: Path(v) for k, v in (services or {}).items()}
        self._ctx = certificate.server_context()
        if self.services:
            self._ctx.set_alpn_protocols([GATEWAY_ALPN, *self.services])
        self._srv: socket.socket | None = None
        self._stop = threading.Event()
        self.address: tuple[str, int] | None = None

    def start(self) -> tuple[str, int]:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        srv = socket.socket(family, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((self.host, self.port))
        srv.listen(64)
        srv.settimeout(0.5)
        self._srv = srv
        self.address = (self.host, srv.getsockname()[1])
        threading.Thread(target=self._accept, name="dome-gateway-tls", daemon=True).start()
        return self.address

    def _accept(self) -> None:
        assert self._srv is not None
        serve_connections(self._srv, self._stop, self._serve)

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(30)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle wait between a reply's records
            tls = self._ctx.wrap_socket(conn, server_side=True)
            tls.settimeout(None)
        except (ssl.SSLError, OSError):
            conn.close()
            return
        target = upstream_for(tls.selected_alpn_protocol(), self.upstream, self.services)
        if target is None:
            tls.close()
            return
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            up.connect(str(target))
            pipe(tls, up)
        except OSError:
            pass
        finally:
            up.close()
            tls.close()

    def stop(self) -> None:
        self._stop.set()
        if self._srv is not None:
            self._srv.close()
