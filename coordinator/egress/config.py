"""The coordinator's egress configuration: where each allowed host goes and
which credential the gate adds. Keys are named, never stored: a route names
the environment variable of the coordinator process that holds the key.

    {"routes": {
       "api.openai.com": {"key_env": "OPENAI_API_KEY",
                          "prices": {"gpt-4o-mini": {"input_usd_per_mtok": 0.15, "output_usd_per_mtok": 0.6}}},
       "models.internal.example": {"upstream": "http://10.0.0.5:8000", "key_env": "INTERNAL_LLM_KEY",
                                   "operations": ["/v1/chat/completions"]}}}

`upstream` defaults to https://<host>; `operations` to the chat completions
path; `auth` to a bearer `Authorization` header (or {"header": "api-key"}
for providers that want the key in another header). A model with no price
costs nothing but still counts its tokens.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlparse

from registry.agent_card import normalize_host
from registry.errors import DomeError

from .metering import Price

DEFAULT_OPERATIONS = ("/v1/chat/completions",)


class EgressConfigInvalid(DomeError):
    code = "EGRESS_CONFIG_INVALID"


@dataclass(frozen=True)
class Route:
    host: str
    upstream: str
    key_env: str | None
    auth_header: str = "authorization"
    operations: tuple[str, ...] = DEFAULT_OPERATIONS
    prices: Mapping[str, Price] = field(default_factory=dict)

    def price(self, model: str) -> Price:
        return self.prices.get(model, Price())


@dataclass(frozen=True)
class EgressConfig:
    routes: Mapping[str, Route]
    timeout_s: float = 120.0
    max_request_bytes: int = 4 * 1024 * 1024

    @classmethod
    def parse(cls, doc: Mapping[str, Any]) -> "EgressConfig":
        routes = {}
        for raw_host, r in (doc.get("routes") or {}).items():
            host = normalize_host(raw_host)
            if host is None or host != raw_host:
                raise EgressConfigInvalid(f"egress route {raw_host!r} is not a lower-case host name",
                                          details={"host": raw_host})
            upstream = str(r.get("upstream") or f"https://{host}").rstrip("/")
            if urlparse(upstream).scheme not in ("http", "https"):
                raise EgressConfigInvalid("an egress upstream is an http(s) URL", details={"host": host})
            routes[host] = Route(host=host, upstream=upstream, key_env=r.get("key_env"),
                                 auth_header=str((r.get("auth") or {}).get("header", "authorization")).lower(),
                                 operations=tuple(r.get("operations") or DEFAULT_OPERATIONS),
                                 prices={m: Price.parse(p) for m, p in (r.get("prices") or {}).items()})
        return cls(routes=routes, timeout_s=float(doc.get("timeout_s", 120.0)),
                   max_request_bytes=int(doc.get("max_request_bytes", 4 * 1024 * 1024)))

    @classmethod
    def load(cls, path: Path | str) -> "EgressConfig":
        try:
            return cls.parse(json.loads(Path(path).read_text()))
        except (OSError, ValueError, AttributeError) as exc:
            raise EgressConfigInvalid(f"cannot read the egress configuration {path}: {exc}",
                                      details={"path": str(path)}) from None
