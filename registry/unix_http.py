"""HTTP over a unix socket: the gateway's, the egress gate's and podman's API all speak it."""
from __future__ import annotations

import http.client
import socket


class UnixHTTPConnection(http.client.HTTPConnection):
    """An `http.client` connection whose socket is the unix socket at `path`; `host` only fills
    the Host header."""

    def __init__(self, path: str, timeout: float | None, host: str = "localhost") -> None:
        super().__init__(host, timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s
