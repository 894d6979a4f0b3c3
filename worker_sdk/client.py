"""A typed gateway client bound to one grant.

The client speaks MCP (official SDK, streamable HTTP) to the coordinator's
gateway over its Unix socket (or loopback URL) with the grant as bearer
token. Before anything is sent it refuses calls the grant does not allow
(OUT_OF_PROFILE) and calls past the grant's budgets (BUDGET_EXHAUSTED:
`max_calls`, `max_calls_by_method`, `max_bytes`), counting what it spent;
the gateway checks the same things again. Idempotency keys are derived
from the node_execution_id so a retried call is recognized as the same.

Synchronous facade: an event loop runs in a background thread, so intent
handlers can call `progress()` / `put_artifact()` from plain code.
"""
from __future__ import annotations

import asyncio
import base64
import json
import threading
from typing import Any, Mapping

from registry.canonical import digest_bytes
from registry.errors import DomeError, ErrorObject


class OutOfProfile(DomeError):
    code = "OUT_OF_PROFILE"


class BudgetExhausted(DomeError):
    code = "BUDGET_EXHAUSTED"


class GatewayError(DomeError):
    code = "GATEWAY_ERROR"
    retry = "light"


class GatewayClient:
    def __init__(self, *, token: str, profile: Mapping[str, Any], socket: str | None = None,
                 url: str | None = None, timeout: float = 60.0) -> None:
        self.token = token
        self.profile = dict(profile)
        self.neid = self.profile["node_execution_id"]
        self.allowed = set(self.profile.get("allowed_methods", []))
        self.budgets = dict(self.profile.get("budgets", {}))
        self.used: dict[str, Any] = {"calls": 0, "by_method": {}, "bytes": 0}
        self._socket, self._url, self._timeout = socket, url, timeout
        self._seq = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="dome-gw-client", daemon=True)
        self._thread.start()
        self._client = None
        self._http = None
        self._run(self._connect())

    # -- plumbing -----------------------------------------------------------
    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(self._timeout + 5)

    async def _connect(self) -> None:
        import httpx2
        from mcp.client.client import Client
        from mcp.client.streamable_http import streamable_http_client

        transport = httpx2.AsyncHTTPTransport(uds=self._socket) if self._socket else None
        base = "http://dome-gateway/mcp" if self._socket else self._url
        self._http = httpx2.AsyncClient(transport=transport, timeout=self._timeout,
                                        headers={"Authorization": f"Bearer {self.token}"})
        self._client = Client(streamable_http_client(base, http_client=self._http), mode="legacy", cache=None)
        await self._client.__aenter__()

    async def _close(self) -> None:
        if self._client is not None:
            await self._client.__aexit__(None, None, None)
        if self._http is not None:
            await self._http.aclose()

    def close(self) -> None:
        try:
            self._run(self._close())
        except Exception:  # noqa: BLE001 - best effort at exit
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(2)

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
        res = self._run(self._client.call_tool(method, args))
        payload = res.structured_content
        if payload is None:
            text = "".join(getattr(c, "text", "") for c in res.content)
            payload = json.loads(text) if text else {}
        if res.is_error:
            ErrorObject.from_dict(payload).raise_()
        return payload

    def list_tools(self) -> list[str]:
        return sorted(t.name for t in self._run(self._client.list_tools()).tools)

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
        digest = digest_bytes(data)
        args = {"idempotency_key": self.key("put_artifact", digest[7:39]), "node_execution_id": self.neid,
                "media_type": media_type, "content_b64": base64.b64encode(data).decode("ascii"),
                "expected_digest": digest}
        if name:
            args["name"] = name
        return self.call("put_artifact", args, nbytes=len(data))["digest"]

    def submit_patch(self, proposal: dict[str, Any]) -> dict[str, Any]:
        return self.call("submit_patch", {"idempotency_key": self.key("submit_patch", proposal["diff_digest"][7:39]),
                                          "node_execution_id": self.neid, "proposal": proposal})

    def complete_task(self, outcome: str, *, summary: dict | None = None, metrics: dict | None = None,
                      evidence: list | None = None, proposal_id: str | None = None,
                      error: dict | None = None) -> dict[str, Any]:
        return self.call("complete_task", {"idempotency_key": self.key("complete_task", "final"),
                                           "node_execution_id": self.neid, "outcome": outcome,
                                           "summary": summary or {}, "metrics": metrics or {},
                                           "evidence": evidence or [], "proposal_id": proposal_id,
                                           "error": error})
