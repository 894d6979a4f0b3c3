"""Who is calling the front door: named clients and their bearer tokens.

An operator issues each agent its own token (`dome mcp token create --name
NAME --allow read|run|promote`). Only the token's SHA-256 is kept, in
`OPS_ROOT/mcp/clients.json` (0600); the token itself is printed once. The
file is read again whenever it changes, so a revoked token is refused on
its next request. The single `http.token` (or `$DOME_MCP_TOKEN`) stays the
operator's token: it may use every tool and see every client's work.

The stdio door has one client: the process that started it, named by its
executable and pid; it is the local user, so it has the operator's view.

Pure decisions (`scope_allows`, `Client.owns`) and the file I/O kept apart.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from registry.errors import DomeError

SCOPES = ("read", "run", "promote")  # each includes the one before it
TOKEN_PREFIX = "dmc1_"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
CLIENTS_FILE = "clients.json"
OWNERS_FILE = "artifact_owners.jsonl"
OPERATOR = "operator"


class ClientTokenError(DomeError):
    code = "CLIENT_TOKEN_INVALID"


class ClientExists(DomeError):
    code = "CLIENT_EXISTS"


class ClientUnknown(DomeError):
    code = "CLIENT_NOT_FOUND"


@dataclass(frozen=True)
class Client:
    """A caller: `scope` is read | run | promote for a named client, None for the operator (everything)."""

    name: str
    scope: str | None = None

    @property
    def operator(self) -> bool:
        return self.scope is None

    def owns(self, owner: str | None) -> bool:
        """May this client see work whose owner is `owner`? (None: made before owners were kept.)"""
        return self.operator or owner == self.name


LOCAL = Client(OPERATOR)  # an in-process caller (`dome mcp call`, an embedding host)


def scope_allows(scope: str | None, tool: str, capability: str) -> bool:
    """Pure: may a client of `scope` call a tool of this capability class?

    read: the read-class tools; run: every tool but promote (submit, cancel,
    execute); promote: every tool. The operator (None) may call anything.
    """
    if scope is None or scope == "promote":
        return True
    if scope == "run":
        return tool != "promote"
    return capability == "read"


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def stdio_client() -> Client:
    """The process that started this stdio door: its executable's name and its pid."""
    ppid = os.getppid()
    try:
        exe = Path(os.readlink(f"/proc/{ppid}/exe")).name
    except OSError:
        exe = "unknown"
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", exe)[:64] or "unknown"  # a name each ledger record can carry
    return Client(f"stdio:{safe}[{ppid}]")


class ClientBook:
    """The named clients of one ops root (hashed tokens), re-read whenever the file changes."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / CLIENTS_FILE
        self._stamp: tuple[int, int] | None = None
        self._by_digest: dict[str, Client] = {}

    # reads ---------------------------------------------------------------
    def _load(self) -> dict[str, Any]:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return {"clients": {}}

    def _refresh(self) -> None:
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp == self._stamp:
            return
        data = self._load() if stamp is not None else {"clients": {}}
        self._by_digest = {c["token_sha256"]: Client(name, c["allow"])
                           for name, c in data.get("clients", {}).items() if not c.get("revoked")}
        self._stamp = stamp

    def lookup(self, token: str) -> Client | None:
        """The live client a presented token names, or None (unknown or revoked)."""
        self._refresh()
        digest = token_digest(token)
        for known, client in self._by_digest.items():
            if hmac.compare_digest(known, digest):
                return client
        return None

    def list(self) -> list[dict[str, Any]]:
        return [{"name": n, "allow": c["allow"], "created": c["created"], "revoked": bool(c.get("revoked"))}
                for n, c in sorted(self._load().get("clients", {}).items())]

    # writes (the operator's CLI) -----------------------------------------
    def create(self, name: str, allow: str) -> str:
        """A new client; returns its token (shown once, never stored)."""
        if not NAME_RE.match(name) or name == OPERATOR or name.startswith("stdio:"):
            raise ClientTokenError(f"client name {name!r} is not allowed",
                                   details={"name": name},
                                   hints=["1-64 letters, digits, '.', '_' or '-'; not 'operator'"])
        if allow not in SCOPES:
            raise ClientTokenError(f"--allow must be one of {', '.join(SCOPES)}", details={"allow": allow})
        data = self._load()
        if name in data.setdefault("clients", {}) and not data["clients"][name].get("revoked"):
            raise ClientExists(f"client {name!r} exists", details={"name": name},
                               hints=["revoke it first, or choose another name"])
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        data["clients"][name] = {"allow": allow, "token_sha256": token_digest(token), "created": int(time.time())}
        self._write(data)
        return token

    def revoke(self, name: str) -> None:
        data = self._load()
        entry = data.get("clients", {}).get(name)
        if entry is None:
            raise ClientUnknown(f"no client {name!r}", details={"name": name})
        entry["revoked"] = int(time.time())
        self._write(data)

    def _write(self, data: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_name(f".{CLIENTS_FILE}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, self.path)


class ArtifactOwners:
    """Which client's call wrote each artifact (resource URI): the first to write it owns it.

    Kept across restarts in `OPS_ROOT/mcp/artifact_owners.jsonl` (0600, append-only, one line
    per new artifact), read once on first use. Only a call that wrote a new artifact appends;
    a lookup is a dictionary read, so a small call touches no file."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / OWNERS_FILE
        self._owners: dict[str, str] | None = None

    def _loaded(self) -> dict[str, str]:
        if self._owners is None:
            owners: dict[str, str] = {}
            try:
                with open(self.path, "rb") as fh:
                    for line in fh:
                        try:
                            rec = json.loads(line)
                            owners.setdefault(str(rec["uri"]), str(rec["owner"]))
                        except (ValueError, KeyError, TypeError):
                            continue  # a line cut short by a crash: that artifact has no owner (the operator's)
            except FileNotFoundError:
                pass
            self._owners = owners
        return self._owners

    def owner(self, uri: str) -> str | None:
        return self._loaded().get(uri)

    def claim(self, uri: str, client: str) -> None:
        """`client` owns `uri` unless someone already does; a new claim is appended to the file."""
        owners = self._loaded()
        if uri in owners:
            return
        owners[uri] = client
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "ab") as fh:
            fh.write(json.dumps({"uri": uri, "owner": client}, separators=(",", ":")).encode() + b"\n")
