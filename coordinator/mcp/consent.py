"""Consent for destructive tools (promote): CONSENT_MODE strict | lenient | off.

The token that moves a ref is the run's own single-use consent token: `dome run`
writes it to ops/runs/RUN/gate/consent.token for a person to read when a run is
held at the human gate; the integration layer verifies it (run-scoped,
expiring) and spends it in the ledger. CONSENT_MODE decides who may supply it:

  strict  (default) only the caller: the user hands the token to the agent.
  lenient the caller may instead echo back a host confirmation token: a call
          without one is refused with CONSENT_REQUIRED carrying a fresh,
          single-use, run-scoped "dct1.*" token (a client shows the user the
          action; agreeing re-sends it). The host then reads the gate token.
          `dome mcp consent --scope RUN` mints one at a terminal too.
  off     the host reads the gate token without asking (logged to telemetry).

Host confirmation tokens: "dct1.<payload b64url>.<hmac-sha256 b64url>" over a
host secret in <ops_root>/mcp/consent.key (0600); spent ids are appended to
<ops_root>/mcp/consent.spent.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from .faults import ConsentInvalid, ConsentRequired

MODES = ("strict", "lenient", "off")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class ConsentBook:
    def __init__(self, root: Path, mode: str = "strict") -> None:
        if mode not in MODES:
            raise ValueError(f"CONSENT_MODE must be one of {MODES}, not {mode!r}")
        self.root = root
        self.mode = mode

    def _key(self) -> bytes:
        path = self.root / "consent.key"
        if not path.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(secrets.token_bytes(32))
        return path.read_bytes()

    def mint(self, tool: str, scope: str, ttl_s: int = 900) -> str:
        payload = {"tool": tool, "scope": scope, "exp": int(time.time()) + ttl_s, "jti": secrets.token_hex(12)}
        body = _b64(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode())
        mac = _b64(hmac.new(self._key(), body.encode(), hashlib.sha256).digest())
        return f"dct1.{body}.{mac}"

    def _spent(self) -> set[str]:
        path = self.root / "consent.spent"
        return set(path.read_text().split()) if path.exists() else set()

    def check_and_spend(self, tool: str, scope: str, token: str | None) -> dict[str, Any]:
        """Raise ConsentRequired / ConsentInvalid, or spend the token and return what was consented."""
        if self.mode == "off":
            return {"mode": "off"}
        if not token:
            details: dict[str, Any] = {"tool": tool, "scope": scope, "mode": self.mode}
            hints = [f"ask the user to run: dome mcp consent --tool {tool} --scope {scope}",
                     "then call again with consent_token"]
            if self.mode == "lenient":
                details["consent_token"] = self.mint(tool, scope, ttl_s=300)
                hints = ["show the user what this will do; if they agree, call again with this consent_token"]
            raise ConsentRequired(f"{tool} is destructive and needs a consent token", details=details, hints=hints)
        try:
            prefix, body, mac = token.split(".")
            if prefix != "dct1":
                raise ValueError
            want = _b64(hmac.new(self._key(), body.encode(), hashlib.sha256).digest())
            if not hmac.compare_digest(want, mac):
                raise ValueError
            payload = json.loads(_unb64(body))
        except (ValueError, json.JSONDecodeError):
            raise ConsentInvalid("consent token is malformed or not signed by this host") from None
        if payload.get("tool") != tool or payload.get("scope") != scope:
            raise ConsentInvalid("consent token was issued for another action",
                                 details={"token_tool": payload.get("tool"), "token_scope": payload.get("scope")})
        if int(payload.get("exp", 0)) < time.time():
            raise ConsentInvalid("consent token has expired", hints=["ask for a new one"])
        jti = str(payload.get("jti"))
        if jti in self._spent():
            raise ConsentInvalid("consent token was already used", hints=["consent tokens are single-use"])
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "consent.spent", "a") as fh:
            fh.write(jti + "\n")
        return {"mode": self.mode, "jti": jti}
