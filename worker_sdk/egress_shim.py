"""A loopback HTTP endpoint inside the sandbox for agent CLIs that take a base URL.

An agent CLI (aider, a Node CLI, anything that speaks the OpenAI API) wants
`OPENAI_BASE_URL=http://...` and a key, not a Unix socket and call proofs.
The shim listens on 127.0.0.1 in the sandbox's own network namespace (which
has nothing else), and forwards each request to the egress gate over
/dome/egress.sock: Host set to the runtime card's host, the grant token as
the bearer, a fresh call proof over {host, path, body_digest}. Whatever
credential the CLI sends is dropped; the real key is added by the gate.
The CLI's process may connect to this one port only (Landlock).

The gate meters whole replies and refuses streamed requests. Most agent
CLIs (the Node ones especially) ask for a stream, so the shim de-streams:
a request with `"stream": true` goes to the gate as a plain one (`stream`
and `stream_options` removed, before the call proof is made over it), and
the whole reply comes back to the CLI as one server-sent-event stream of
chat.completion.chunk objects (the message, the finish reason, the usage
when asked for, `[DONE]`). A refusal stays a plain JSON error.
"""
from __future__ import annotations

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from registry.canonical import digest_bytes
from registry.unix_http import UnixHTTPConnection

EGRESS_METHOD = "egress"
FORWARD_HEADERS = ("content-type", "accept")


class EgressShim:
    def __init__(self, *, gateway: Any, host: str, socket: str, timeout: float = 300.0) -> None:
        shim = self
        self.gateway, self.host, self.socket, self.timeout = gateway, host, socket, timeout
        self.calls = 0
        self.refusals: list[dict[str, Any]] = []  # the gate's typed errors, newest last

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(n) if n > 0 else b""
                body, streamed, usage = unstream_request(body)
                status, ctype, data = shim.forward(self.command, self.path, body,
                                                   {k.lower(): v for k, v in self.headers.items()})
                if streamed and status == 200:
                    ctype, data = "text/event-stream", sse_from_completion(data, include_usage=usage)
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_CONNECT = _any

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, name="dome-egress-shim", daemon=True)

    def forward(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
        out = {k: headers[k] for k in FORWARD_HEADERS if k in headers}
        out.update({"host": self.host, "authorization": f"Bearer {self.gateway.token}",
                    "content-length": str(len(body))})
        proof = self.gateway.proof(EGRESS_METHOD, {"host": self.host, "path": path, "body_digest": digest_bytes(body)})
        if proof:
            out["dome-call-proof"] = proof
        conn = UnixHTTPConnection(self.socket, self.timeout, host="dome-egress")
        try:
            conn.request(method, path, body, out)
            resp = conn.getresponse()
            data = resp.read()
            self.calls += 1
            if resp.status >= 400:
                try:
                    err = json.loads(data)["error"]["dome_error"]
                    self.refusals.append(err)
                except (ValueError, KeyError, TypeError):
                    pass
            return resp.status, resp.getheader("content-type", "application/json"), data
        except (OSError, http.client.HTTPException) as exc:
            return 502, "application/json", (b'{"error": {"message": "egress gate unreachable: %s", '
                                              b'"code": "EGRESS_UNAVAILABLE"}}' % type(exc).__name__.encode())
        finally:
            conn.close()

    def start(self) -> "EgressShim":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def unstream_request(body: bytes) -> tuple[bytes, bool, bool]:
    """(the body to forward, whether the CLI asked for a stream, whether it asked
    for usage in the stream). A body that is not a JSON object passes unchanged."""
    try:
        req = json.loads(body)
    except ValueError:
        return body, False, False
    if not isinstance(req, dict) or req.get("stream") is not True:
        return body, False, False
    opts = req.pop("stream_options", None)
    req.pop("stream")
    usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
    return json.dumps(req, separators=(",", ":")).encode(), True, usage


def sse_from_completion(data: bytes, *, include_usage: bool) -> bytes:
    """A whole chat.completion as the server-sent events a streaming client reads:
    per choice one chunk with the whole message as its delta and one with the
    finish reason, then the usage (when asked for) and `[DONE]`."""
    try:
        done = json.loads(data)
    except ValueError:
        done = None
    if not isinstance(done, dict):
        return b"data: [DONE]\n\n"
    head = {"id": done.get("id", "chatcmpl-dome"), "object": "chat.completion.chunk",
            "created": done.get("created", 0), "model": done.get("model")}
    events = []
    for ch in done.get("choices") or []:
        msg = ch.get("message") or {}
        delta: dict[str, Any] = {"role": msg.get("role", "assistant"), "content": msg.get("content")}
        if msg.get("tool_calls"):
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(msg["tool_calls"])]
        idx = ch.get("index", 0)
        events.append({**head, "choices": [{"index": idx, "delta": delta, "finish_reason": None}]})
        events.append({**head, "choices": [{"index": idx, "delta": {}, "finish_reason": ch.get("finish_reason")}]})
    if include_usage and done.get("usage") is not None:
        events.append({**head, "choices": [], "usage": done["usage"]})
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
