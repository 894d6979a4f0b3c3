"""A typed gateway client bound to one grant.

The client speaks MCP (JSON-RPC 2.0 over streamable HTTP, JSON responses)
to the coordinator's gateway over its Unix socket (or a loopback URL) with
the grant as bearer token, in the sessionless protocol revision 2026-07-28:
every request carries its protocol version and client capabilities in
`params._meta` and the `mcp-method`/`mcp-name` routing headers, so there is
no initialize round trip. The wire layer is a few lines of http.client so
a worker starts in a fraction of a second; the gateway itself is the
official MCP SDK server, and tests/runloop/test_gateway.py drives it with
the official SDK client as well.

Before anything is sent the client refuses calls the grant does not allow
(OUT_OF_PROFILE) and calls past the grant's budgets (BUDGET_EXHAUSTED:
`max_calls`, `max_calls_by_method`, `max_bytes`), counting what it spent;
the gateway checks again. When the grant is sender-constrained (`cnf`),
the client holds the attempt's worker key and proves every call with it
(method, canonical arguments digest, idempotency key, timestamp, a fresh
nonce per send) in the `dome-call-proof` header: a keyed MAC under a key
derived from the worker key, or with `signed_proofs=True` an Ed25519
signature; the key never leaves the client. Idempotency keys derive from the
node_execution_id, so a retried call is recognized as the same call.

`put_artifact_carried` and `submit_patch_carried` make a call without sending
it: the next submit_patch or complete_task carries it (`carried`, with its own
proof), so a task's diff, proposal and result take one request. Its budget is
charged when it is made; a refusal answers the carrying call; what no call
took is sent alone at `close()`.
"""
from __future__ import annotations

import base64
import http.client
import json
import os
import threading
import time
from typing import Any, Mapping
from urllib.parse import urlparse

from registry.canonical import digest_bytes
from registry.errors import DomeError, ErrorObject
from registry.signing import SigningKey
from registry.toolprofile import PROOF_HEADER
from registry.unix_http import UnixHTTPConnection

CARRIERS = {"submit_patch": ("put_artifact",), "complete_task": ("put_artifact", "submit_patch")}
MAX_CARRIED = 4  # the gateway's bound on the calls one request carries
MAX_CARRIED_BYTES = 256 * 1024  # a larger artifact is sent alone, at once
PROTOCOL_VERSION = "2026-07-28"  # the sessionless MCP revision: no initialize round trip per worker


class OutOfProfile(DomeError):
    code = "OUT_OF_PROFILE"


class BudgetExhausted(DomeError):
    code = "BUDGET_EXHAUSTED"


class WorkerKeyMismatch(DomeError):
    code = "WORKER_KEY_MISMATCH"


class GatewayError(DomeError):
    code = "GATEWAY_ERROR"
    retry = "light"


class GatewayClient:
    def __init__(self, *, token: str, profile: Mapping[str, Any], socket: str | None = None,
                 url: str | None = None, timeout: float = 60.0, worker_key: SigningKey | None = None,
                 signed_proofs: bool = False) -> None:
        self.token = token
        self.profile = dict(profile)
        cnf = self.profile.get("cnf")
        if cnf is not None and (worker_key is None or worker_key.kid != cnf.get("kid")):
            raise WorkerKeyMismatch("the grant is sender-constrained and this client lacks its worker key",
                                    details={"cnf_kid": cnf.get("kid")})
        self._worker_key = worker_key if cnf is not None else None
        # proofs are keyed MACs (one HMAC to check) unless signed ones are asked for
        self._mac_key = None
        if self._worker_key is not None and not signed_proofs:
            from registry.toolprofile import call_mac_key
            self._mac_key = call_mac_key(self._worker_key.seed)
        self.neid = self.profile["node_execution_id"]
        self.allowed = set(self.profile.get("allowed_methods", []))
        self.budgets = dict(self.profile.get("budgets", {}))
        self.used: dict[str, Any] = {"calls": 0, "by_method": {}, "bytes": 0}
        self._socket, self._url, self._timeout = socket, url, timeout
        self._seq = 0
        self._rpc_id = 0
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self._carry: list[dict[str, Any]] = []  # calls made but not yet sent: the next carrier takes them

    # -- wire -----------------------------------------------------------------
    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is not None:
            return self._conn
        if self._socket:
            self._conn = UnixHTTPConnection(self._socket, self._timeout, host="dome-gateway")
            self._path = "/mcp"
        else:
            u = urlparse(self._url or "")
            self._conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80, timeout=self._timeout)
            self._path = u.path or "/mcp"
        return self._conn

    def proof(self, method: str, args: Mapping[str, Any]) -> str | None:
        """A fresh call proof for a request outside MCP (the egress gate), or None for a bearer grant."""
        return self._proof(method, args) if self._worker_key is not None else None

    def _proof(self, name: str, args: Mapping[str, Any]) -> str:
        if self._mac_key is not None:
            from registry.toolprofile import make_call_mac
            return make_call_mac(self._mac_key, jti=self.profile["jti"], method=name, args=args,
                                 idempotency_key=args.get("idempotency_key"), ts=int(time.time()),
                                 nonce=os.urandom(8).hex())
        from registry.toolprofile import make_call_proof
        return make_call_proof(self._worker_key, jti=self.profile["jti"], method=name, args=args,
                               idempotency_key=args.get("idempotency_key"), ts=int(time.time()),
                               nonce=os.urandom(8).hex())

    def _rpc(self, method: str, params: Any, *, notify: bool = False) -> Any:
        with self._lock:
            params = {**(params or {}), "_meta": {"io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
                                                  "io.modelcontextprotocol/clientCapabilities": {}}}
            msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
            if not notify:
                self._rpc_id += 1
                msg["id"] = self._rpc_id
            headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                       "Authorization": f"Bearer {self.token}", "mcp-protocol-version": PROTOCOL_VERSION,
                       "mcp-method": method}
            if "name" in params:
                headers["mcp-name"] = str(params["name"])
            for attempt in range(3):
                if self._worker_key is not None and method == "tools/call":  # fresh proofs per send
                    for c in (params.get("arguments") or {}).get("carried") or ():
                        c["proof"] = self._proof(c["tool"], c["arguments"])
                    headers[PROOF_HEADER] = self._proof(params["name"], params.get("arguments") or {})
                body = json.dumps(msg).encode()
                try:
                    conn = self._connection()
                    conn.request("POST", self._path, body, headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    break
                except (OSError, http.client.HTTPException) as exc:
                    self._conn = None
                    if attempt == 2:
                        raise GatewayError(f"gateway unreachable: {exc}", details={"method": method}) from None
                    time.sleep(0.05 * (attempt + 1))
            if notify:
                return None
            if resp.status != 200:
                raise GatewayError(f"gateway answered HTTP {resp.status}", details={"body": data[:500].decode("utf-8", "replace")})
            reply = json.loads(data)
            if "error" in reply:
                data = reply["error"].get("data")
                if isinstance(data, dict) and isinstance(data.get("code"), str) and "message" in data:
                    ErrorObject.from_dict(data).raise_()  # a typed refusal, as a call's isError gives
                raise GatewayError(f"gateway error: {reply['error'].get('message')}", details=reply["error"])
            return reply["result"]

    def close(self) -> None:
        carried, self._carry = self._carry, []
        for c in carried:  # nothing carried is lost: what no later call took is sent alone
            self._send(c["tool"], c["arguments"])
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- budget + profile checks (before sending) ---------------------------
    def _charge(self, method: str, nbytes: int = 0) -> None:
        if method not in self.allowed:
            raise OutOfProfile(f"method {method!r} is not in this worker's grant",
                               details={"method": method, "allowed": sorted(self.allowed)})
        by = self.used["by_method"]
        if "max_calls" in self.budgets and self.used["calls"] + 1 > self.budgets["max_calls"]:
            raise BudgetExhausted("grant call budget exhausted", details={"max_calls": self.budgets["max_calls"]})
        per = self.budgets.get("max_calls_by_method", {})
        if method in per and by.get(method, 0) + 1 > per[method]:
            raise BudgetExhausted(f"call budget for {method} exhausted", details={"method": method})
        if "max_bytes" in self.budgets and self.used["bytes"] + nbytes > self.budgets["max_bytes"]:
            raise BudgetExhausted("grant byte budget exhausted", details={"max_bytes": self.budgets["max_bytes"]})
        self.used["calls"] += 1
        by[method] = by.get(method, 0) + 1
        self.used["bytes"] += nbytes

    def call(self, method: str, args: dict[str, Any], *, nbytes: int = 0) -> dict[str, Any]:
        self._charge(method, nbytes)
        carried, self._carry = self._carry, []
        if carried and method in CARRIERS and len(carried) <= MAX_CARRIED and \
                all(c["tool"] in CARRIERS[method] for c in carried):
            args = {**args, "carried": [{"tool": c["tool"], "arguments": c["arguments"], "proof": None}
                                        for c in carried]}
        else:
            for c in carried:  # not carried by this method: sent alone first, in order
                self._send(c["tool"], c["arguments"])
        return self._send(method, args)

    def _send(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        res = self._rpc("tools/call", {"name": method, "arguments": args})
        payload = res.get("structuredContent")
        if payload is None:
            text = "".join(c.get("text", "") for c in res.get("content", []))
            payload = json.loads(text) if text else {}
        if res.get("isError"):
            ErrorObject.from_dict(payload).raise_()
        return payload

    def list_tools(self) -> list[str]:
        return sorted(t["name"] for t in self._rpc("tools/list", {})["tools"])

    def key(self, method: str, suffix: str | None = None) -> str:
        if suffix is None:
            self._seq += 1
            suffix = str(self._seq)
        return f"{self.neid}:{method}:{suffix}"

    # -- typed methods --------------------------------------------------------
    def report_progress(self, fraction: float, message: str = "") -> dict[str, Any]:
        return self.call("report_progress", {"idempotency_key": self.key("report_progress"),
                                             "node_execution_id": self.neid,
                                             "fraction": max(0.0, min(1.0, float(fraction))),
                                             "message": message[:2000]})

    def put_artifact(self, data: bytes, media_type: str = "application/octet-stream",
                     name: str | None = None) -> str:
        return self.call("put_artifact", self._artifact_args(data, media_type, name), nbytes=len(data))["digest"]

    def _artifact_args(self, data: bytes, media_type: str, name: str | None) -> dict[str, Any]:
        digest = digest_bytes(data)
        args = {"idempotency_key": self.key("put_artifact", digest[7:39]), "node_execution_id": self.neid,
                "media_type": media_type, "content_b64": base64.b64encode(data).decode("ascii"),
                "expected_digest": digest}
        if name:
            args["name"] = name
        return args

    def submit_patch(self, proposal: dict[str, Any]) -> dict[str, Any]:
        return self.call("submit_patch", self._submit_args(proposal))

    def _submit_args(self, proposal: dict[str, Any]) -> dict[str, Any]:
        return {"idempotency_key": self.key("submit_patch", proposal["diff_digest"][7:39]),
                "node_execution_id": self.neid, "proposal": proposal}

    # -- carried calls: made now, sent with the next call that can carry them ----
    def _later(self, method: str, args: dict[str, Any], nbytes: int = 0) -> None:
        self._charge(method, nbytes)  # budgets are charged when the call is made, as for any call
        self._carry.append({"tool": method, "arguments": args})

    def put_artifact_carried(self, data: bytes, media_type: str = "application/octet-stream",
                             name: str | None = None) -> str:
        """put_artifact, sent with the next submit_patch or complete_task (or alone, before any
        other call, or at close). Returns the digest, which the content alone decides."""
        if len(data) > MAX_CARRIED_BYTES:
            return self.put_artifact(data, media_type, name)
        args = self._artifact_args(data, media_type, name)
        self._later("put_artifact", args, nbytes=len(data))
        return args["expected_digest"]

    def submit_patch_carried(self, proposal: dict[str, Any]) -> str:
        """submit_patch, sent with the complete_task that follows; returns the proposal_id
        (the proposal's own). A refusal answers the carrying call."""
        self._later("submit_patch", self._submit_args(proposal))
        return str(proposal["proposal_id"])

    def complete_task(self, outcome: str, *, summary: dict | None = None, metrics: dict | None = None,
                      evidence: list | None = None, proposal_id: str | None = None,
                      error: dict | None = None) -> dict[str, Any]:
        return self.call("complete_task", {"idempotency_key": self.key("complete_task", "final"),
                                           "node_execution_id": self.neid, "outcome": outcome,
                                           "summary": summary or {}, "metrics": metrics or {},
                                           "evidence": evidence or [], "proposal_id": proposal_id,
                                           "error": error})
