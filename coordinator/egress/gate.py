"""The egress gate: the only way a sandboxed worker reaches a model API.

It listens on a Unix socket of the coordinator, bound into each agent's
sandbox as /dome/egress.sock beside the gateway socket; the sandbox itself
has no network. Workers on other hosts reach the same socket through their
node's relay and the run's TLS listener (coordinator.gateway.tls, ALPN
`dome-egress`), so everything below holds for them unchanged. A worker
speaks plain HTTP to it, naming the upstream host in the Host header (an
OpenAI SDK client with base_url http://<host>/v1 and a Unix-socket
transport does exactly that), with its grant token as the bearer
credential and, for a sender-constrained grant, a call proof over {host,
path, body_digest} (coordinator.grants.GrantVerifier.verify_egress).

For every request, in order (each refusal a typed error, never forwarded):
the grant verifies; no CONNECT or other tunnelling (EGRESS_METHOD_NOT_ALLOWED);
the host is in the grant's `constraints.network.allow_hosts` and has a
route in the coordinator's egress configuration (EGRESS_HOST_NOT_ALLOWED);
the path is an operation of that route (EGRESS_OPERATION_NOT_ALLOWED); the
body is JSON naming a model of the grant's `allow_models`
(EGRESS_MODEL_NOT_ALLOWED), not streamed (EGRESS_STREAMING_UNSUPPORTED);
the node's token and cost budgets cover the reservation (BUDGET_EXHAUSTED,
metering.reserve). Then the gate writes the output cap into the request,
adds the route's key (read from the coordinator's environment at that
moment; the worker's own Authorization is dropped), forwards it, and
settles: one `model.call` event (model, tokens in and out, cost, latency,
request and response digests; the bodies are blobs) in the transaction that
closes the reservation. Refusals are `egress.refused` events.
"""
from __future__ import annotations

import http.client
import json
import logging
import os
import secrets
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping
from urllib.parse import urlparse

from registry.agent_card import normalize_host
from registry.canonical import digest_bytes
from registry.errors import DomeError
from registry.grant_errors import GrantError
from registry.toolprofile import PROOF_HEADER

from ..gateway.auth import gateway_audience
from . import metering as mt
from .config import EgressConfig, Route

if TYPE_CHECKING:
    from ledger import Ledger

log = logging.getLogger("dome.egress")
Transact = Callable[[Callable[[Any], tuple[Any, list]]], Any]


class EgressRefused(DomeError):
    code = "EGRESS_REFUSED"


class HostNotAllowed(EgressRefused):
    code = "EGRESS_HOST_NOT_ALLOWED"


class ModelNotAllowed(EgressRefused):
    code = "EGRESS_MODEL_NOT_ALLOWED"


class MethodNotAllowed(EgressRefused):
    code = "EGRESS_METHOD_NOT_ALLOWED"


class OperationNotAllowed(EgressRefused):
    code = "EGRESS_OPERATION_NOT_ALLOWED"


class BudgetExhausted(EgressRefused):
    code = "BUDGET_EXHAUSTED"


class UpstreamFailed(DomeError):
    code = "EGRESS_UPSTREAM_FAILED"
    retry = "light"


STATUS = {"GRANT_MISSING": 401, "BUDGET_EXHAUSTED": 402, "EGRESS_METHOD_NOT_ALLOWED": 405,
          "EGRESS_REQUEST_TOO_LARGE": 413, "EGRESS_UPSTREAM_FAILED": 502, "EGRESS_KEY_UNAVAILABLE": 503}


def ledger_transact(ledger: Ledger) -> Transact:
    """A Transact over a bare Ledger (the run loop passes its LedgerWriter.transact)."""
    def transact(fn: Callable[[Any], tuple[Any, list]]) -> Any:
        with ledger.transaction() as tx:
            return fn(tx)[0]
    return transact


def _keys(p: Mapping[str, Any]) -> dict[str, Any]:
    return {"wave_id": p.get("wave_id"), "node_id": p.get("node_id"), "node_execution_id": p.get("node_execution_id"),
            "task_id": p.get("node_id")}


class EgressGate:
    def __init__(self, *, run_id: str, verifier: Any, config: EgressConfig, transact: Transact, blobs: Any,
                 socket_path: Path, audience: str | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        self.run_id = run_id
        self.verifier = verifier
        self.config = config
        self.transact = transact
        self.blobs = blobs
        self.socket_path = Path(socket_path)
        self.audience = audience or gateway_audience()
        self._environ = os.environ if environ is None else environ
        self.refusals: list[dict[str, Any]] = []
        self._server: socketserver.ThreadingUnixStreamServer | None = None
        self._thread: threading.Thread | None = None

    # -- the decision path, transport-free -----------------------------------------
    def handle(self, method: str, target: str, headers: Mapping[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        """One request from a worker -> (status, headers, body) for it."""
        profile: Mapping[str, Any] | None = None
        try:
            if method != "POST":
                raise MethodNotAllowed(f"the egress gate forwards POST requests only, not {method}",
                                       details={"method": method, "target": target[:200]},
                                       hints=["no tunnels (CONNECT) and no other methods leave the sandbox"])
            auth = headers.get("authorization", "")
            if not auth.lower().startswith("bearer "):
                raise DomeError("no bearer grant on the request", code="GRANT_MISSING")
            host = normalize_host(headers.get("host", ""))
            path = target if target.startswith("/") else urlparse(target).path or "/"
            profile = self.verifier.verify_egress(
                auth[7:].strip(), run_id=self.run_id, audience=self.audience, proof=headers.get(PROOF_HEADER),
                request={"host": host, "path": path, "body_digest": digest_bytes(body)})
            return self._forward(profile, host, path, body)
        except DomeError as exc:
            return self._refuse(exc, profile, method, headers.get("host", ""), target)

    def _refuse(self, exc: DomeError, profile: Mapping[str, Any] | None, method: str, host: str,
                target: str) -> tuple[int, dict[str, str], bytes]:
        err = exc.to_object()
        if not isinstance(exc, GrantError):  # a rejected grant is already a grant.rejected event
            payload = {"code": err["code"], "message": err["message"], "method": method, "host": host[:253],
                       "target": target[:300], "profile_id": (profile or {}).get("profile_id"),
                       "details": err.get("details", {})}
            self.transact(lambda tx: (None, [tx.append(self.run_id, mt.REFUSED_TOPIC, payload,
                                                       **_keys(profile or {}))]))
        self.refusals.append(err)
        status = STATUS.get(err["code"], 401 if err["code"].startswith("GRANT_") else 403)
        # OpenAI-style error body; the SDK hands `error` to the caller, so the ErrorObject rides inside it
        body = {"error": {"message": err["message"], "type": "dome_egress", "code": err["code"], "dome_error": err}}
        return status, {"content-type": "application/json", "x-should-retry": "false"}, json.dumps(body).encode()

    def _route(self, profile: Mapping[str, Any], host: str | None, path: str) -> Route:
        allowed = (profile.get("constraints", {}).get("network") or {}).get("allow_hosts") or []
        route = self.config.routes.get(host or "")
        if host is None or host not in allowed or route is None:
            raise HostNotAllowed(f"host {host!r} is not allowed by this grant", details={
                "host": host, "allow_hosts": sorted(allowed), "routed": route is not None})
        if path.split("?", 1)[0] not in route.operations:
            raise OperationNotAllowed(f"{path!r} is not an operation the gate forwards to {host}",
                                      details={"path": path[:300], "operations": list(route.operations)})
        return route

    def _forward(self, profile: Mapping[str, Any], host: str | None, path: str,
                 body: bytes) -> tuple[int, dict[str, str], bytes]:
        route = self._route(profile, host, path)
        if len(body) > self.config.max_request_bytes:
            raise EgressRefused("request body too large", code="EGRESS_REQUEST_TOO_LARGE",
                                details={"size": len(body), "limit": self.config.max_request_bytes})
        try:
            req = json.loads(body)
        except ValueError:
            raise EgressRefused("the request body is not JSON", code="EGRESS_REQUEST_INVALID") from None
        if not isinstance(req, dict):
            raise EgressRefused("the request body is not a JSON object", code="EGRESS_REQUEST_INVALID")
        model = req.get("model")
        allow_models = (profile.get("constraints", {}).get("network") or {}).get("allow_models") or []
        if not isinstance(model, str) or model not in allow_models:
            raise ModelNotAllowed(f"model {model!r} is not on this grant's allowlist",
                                  details={"model": model if isinstance(model, str) else None,
                                           "allow_models": sorted(allow_models)})
        if req.get("stream"):
            raise EgressRefused("streamed responses are not forwarded (the gate meters whole replies)",
                                code="EGRESS_STREAMING_UNSUPPORTED", hints=["send stream: false"])
        key = self._environ.get(route.key_env) if route.key_env else None
        if route.key_env and not key:
            raise DomeError(f"the coordinator has no key for {host} (its environment lacks {route.key_env})",
                            code="EGRESS_KEY_UNAVAILABLE", details={"host": host, "key_env": route.key_env})
        price = route.price(model)
        cap_field, asked = mt.requested_cap(req)
        rid = "rsv-" + secrets.token_hex(8)
        budgets = profile.get("budgets") or {}
        keys = _keys(profile)

        def account(tx: Any) -> mt.Account:
            last = tx.last_payload(self.run_id, mt.ACCOUNT_TOPICS, node_id=profile["node_id"])
            return mt.Account.from_snapshot((last or {}).get("account_after"))

        def do_reserve(tx: Any) -> tuple[Any, list]:
            acct = account(tx)
            r = mt.reserve(account=acct, budgets=budgets, request_bytes=len(body), requested_cap=asked, price=price)
            if isinstance(r, dict):
                raise BudgetExhausted(f"the node's {r['budget']} budget is exhausted ({r['used']} used of {r['limit']})",
                                      details={**r, "node_id": profile["node_id"]},
                                      hints=["a retry or another attempt of this node shares the same budget"])
            rec = tx.append(self.run_id, mt.RESERVED_TOPIC, {
                "reservation_id": rid, "profile_id": profile["profile_id"], "model": model, "host": host,
                "tokens_reserved": r.tokens, "cost_micros_reserved": r.cost_micros, "output_cap": r.output_cap,
                "account_after": acct.reserved(rid, r.tokens, r.cost_micros).snapshot()}, **keys)
            return r, [rec]

        res: mt.Reservation = self.transact(do_reserve)
        req[cap_field] = res.output_cap
        out_body = json.dumps(req, separators=(",", ":")).encode()
        request_digest = self.blobs.put(out_body)  # the exact bytes sent, minus the key (a header)
        t0 = time.monotonic()
        status, rbody, ctype, error = self._send(route, path, out_body, key)
        latency_ms = round((time.monotonic() - t0) * 1000, 3)
        if key:
            rbody = rbody.replace(key.encode(), b"[redacted]")  # an echoing upstream does not hand the key over
        try:
            reply = json.loads(rbody) if rbody else None
        except ValueError:
            reply = None
        usage = mt.usage_of(reply)
        tin, tout = mt.charge(usage, res)  # no usage reported (an error reply too): the whole reservation
        response_digest = self.blobs.put(rbody) if rbody else None
        call = {"reservation_id": rid, "profile_id": profile["profile_id"], "model": model, "host": host,
                "path": path, "status": status, "tokens_in": tin, "tokens_out": tout,
                "cost_micros": price.cost_micros(tin, tout), "latency_ms": latency_ms,
                "request_digest": request_digest, "response_digest": response_digest,
                "usage_reported": usage is not None, "over_reservation": tin + tout > res.tokens,
                "error": error}
        self.transact(lambda tx: (None, [tx.append(self.run_id, mt.CALL_TOPIC, {
            **call, "account_after": account(tx).settled(rid, tin + tout, call["cost_micros"]).snapshot()}, **keys)]))
        if error is not None:
            raise UpstreamFailed(f"the upstream {host} failed: {error}", details={"host": host})
        return status, {"content-type": ctype or "application/json"}, rbody

    def _send(self, route: Route, path: str, body: bytes, key: str | None) -> tuple[int, bytes, str, str | None]:
        u = urlparse(route.upstream)
        conn_cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        headers = {"content-type": "application/json", "accept": "application/json", "host": u.netloc}
        if key:
            headers[route.auth_header] = f"Bearer {key}" if route.auth_header == "authorization" else key
        conn = conn_cls(u.hostname, u.port, timeout=self.config.timeout_s)
        try:
            conn.request("POST", (u.path.rstrip("/") + path) or "/", body, headers)
            resp = conn.getresponse()
            return resp.status, resp.read(), resp.getheader("content-type", ""), None
        except (OSError, http.client.HTTPException) as exc:
            return 502, b"", "", f"{type(exc).__name__}: {exc}"[:300]
        finally:
            conn.close()

    # -- transport -------------------------------------------------------------------
    def start(self) -> None:
        gate = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                try:
                    n = int(self.headers.get("content-length") or 0)
                except ValueError:
                    n = -1
                if n < 0 or n > gate.config.max_request_bytes:
                    status, hdrs, body = gate._refuse(
                        EgressRefused("request body too large or unframed", code="EGRESS_REQUEST_TOO_LARGE"),
                        None, self.command, self.headers.get("host", ""), self.path)
                    self.close_connection = True
                else:
                    data = self.rfile.read(n) if n else b""
                    status, hdrs, body = gate.handle(self.command, self.path,
                                                     {k.lower(): v for k, v in self.headers.items()}, data)
                    if self.command == "CONNECT":
                        self.close_connection = True  # never a tunnel: the connection ends with the refusal
                self.send_response(status)
                for k, v in hdrs.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_CONNECT = _any

            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("egress: " + fmt, *args)

            def address_string(self) -> str:
                return "sandbox"

        if self.socket_path.exists():
            self.socket_path.unlink()
        self._server = socketserver.ThreadingUnixStreamServer(str(self.socket_path), Handler)
        self._server.daemon_threads = True
        os.chmod(self.socket_path, 0o666)
        self._thread = threading.Thread(target=self._server.serve_forever, name="dome-egress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
        if self.socket_path.exists():
            self.socket_path.unlink()
