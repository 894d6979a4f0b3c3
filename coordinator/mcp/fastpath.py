"""Fast cold start for `dome mcp` over stdio.

Importing the MCP SDK costs about a second of CPU (its pydantic protocol
models), far over the 300 ms cold-start budget to tools/list. So the stdio
entry point starts answering before the SDK is loaded:

1. fd 1 is claimed (registry.stdio_guard); the SDK and the host are imported
   on a background thread.
2. Meanwhile the main thread reads frames. `initialize`, `tools/list`,
   `server/discover` and `ping` are answered from a cache of the SDK's own
   earlier answers (recorded from the wire, keyed by dome + SDK versions, the
   registry files and the test-tools switch). Anything else, or a cache
   miss, waits for the SDK.
3. Hand-over: the SDK server gets the frames it must know about replayed
   first (the `initialize` and `notifications/initialized` of a handshake
   session), then everything that follows. Its answers to requests the fast
   path already answered are dropped, so every request gets exactly one
   answer, with the SDK's own bytes.

The cache is rebuilt from live traffic whenever its key changes, so a stale
cache can cost speed, never correctness.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any, BinaryIO

MODERN_KEY = "io.modelcontextprotocol/protocolVersion"
REPO_ROOT = Path(__file__).resolve().parents[2]


def cache_path() -> Path | None:
    base = os.environ.get("DOME_MCP_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME")
    root = Path(base) if base else Path.home() / ".cache"
    return root / "dome" if not os.environ.get("DOME_MCP_CACHE_DIR") else root


def cache_key(extra: str = "") -> str:
    h = hashlib.sha256()
    h.update(sys.executable.encode())
    h.update(extra.encode())
    h.update(os.environ.get("DOME_MCP_TEST_TOOLS", "").encode())
    h.update(os.environ.get("DOME_MCP_CONFORMANCE", "").encode())
    import importlib.util

    for pkg in ("mcp", "mcp_types"):  # an SDK upgrade rewrites these files (cheaper than importlib.metadata)
        spec = importlib.util.find_spec(pkg)
        if spec is not None and spec.origin:
            st = os.stat(spec.origin)
            h.update(f"{spec.origin}:{st.st_size}:{st.st_mtime_ns}".encode())
    for sub in ("registry/tools", "registry/schemas", "coordinator/mcp"):
        for dirpath, dirnames, filenames in os.walk(REPO_ROOT / sub):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith((".json", ".py")):
                    st = os.stat(os.path.join(dirpath, name))
                    h.update(f"{dirpath}/{name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:24]


class AnswerCache:
    def __init__(self, extra: str = "") -> None:
        self.key = cache_key(extra)
        d = cache_path()
        self.path = d / f"mcp-fastpath-{self.key}.json" if d else None
        self.data: dict[str, Any] = {}
        self.dirty = False
        if self.path is not None and self.path.is_file():
            try:
                self.data = json.loads(self.path.read_text())
            except (OSError, json.JSONDecodeError):
                self.data = {}

    def get(self, slot: str) -> Any:
        return self.data.get(slot)

    def put(self, slot: str, value: Any) -> None:
        if self.data.get(slot) != value:
            self.data[slot] = value
            self.dirty = True

    def save(self) -> None:
        if not self.dirty or self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.data, separators=(",", ":")))
            os.replace(tmp, self.path)
            self.dirty = False
        except OSError:
            pass


def _is_modern(msg: dict[str, Any]) -> bool:
    meta = (msg.get("params") or {}).get("_meta") or {}
    return isinstance(meta, dict) and MODERN_KEY in meta


def _slot(msg: dict[str, Any]) -> str | None:
    """The cache slot of a request the fast path may answer, or None."""
    method = msg.get("method")
    if method == "initialize":
        return "initialize:" + str((msg.get("params") or {}).get("protocolVersion"))
    if method == "tools/list" and not (msg.get("params") or {}).get("cursor"):
        return "tools/list:" + ("modern" if _is_modern(msg) else "legacy")
    if method == "server/discover":
        return "server/discover"
    return None


class FastFront:
    """Reads frames until the SDK is ready or a frame needs it."""

    def __init__(self, rd: BinaryIO, wr: BinaryIO, cache_extra: str = "") -> None:
        self.rd = rd
        self.wr = wr
        self.cache = AnswerCache(cache_extra)
        self.replay: list[bytes] = []  # frames the SDK must see first
        self.pending: list[bytes] = []  # frames read but not answered
        self.suppress: set[Any] = set()  # ids whose SDK answers are dropped
        self.recording: dict[Any, str] = {}  # request id -> cache slot to record from the SDK's answer
        self.era: str | None = None
        self.eof = False

    def _send(self, obj: dict[str, Any]) -> None:
        self.wr.write(json.dumps(obj, separators=(",", ":")).encode() + b"\n")
        self.wr.flush()

    def run(self, sdk_ready: threading.Event) -> None:
        while not sdk_ready.is_set():
            line = self.rd.readline()
            if not line:
                self.eof = True
                return
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                self.pending.append(line)
                return
            if not isinstance(msg, dict) or not self.handle(msg, line):
                self.pending.append(line)
                return

    def handle(self, msg: dict[str, Any], line: bytes) -> bool:
        """True when answered (or recorded) here; False to hand the frame to the SDK."""
        method = msg.get("method")
        if "id" not in msg:  # a notification
            if method == "notifications/initialized" and self.era == "legacy":
                self.replay.append(line)
                return True
            return False
        if method == "ping":
            self._send({"jsonrpc": "2.0", "id": msg["id"], "result": {}})
            return True
        slot = _slot(msg)
        if slot is None:
            return False
        if method == "initialize":
            if self.era is not None:
                return False
            self.era = "legacy"
        elif _is_modern(msg):
            if self.era == "legacy":
                return False
            self.era = "modern"
        elif self.era != "legacy":
            return False  # a handshake-era request before initialize: the SDK decides
        cached = self.cache.get(slot)
        if cached is None:
            return False
        self._send({"jsonrpc": "2.0", "id": msg["id"], "result": cached})
        if method == "initialize":
            self.replay.append(line)
            self.suppress.add(msg["id"])
        return True

    def note_forwarded(self, line: bytes) -> None:
        """A frame going to the SDK: remember which answers to record into the cache."""
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            return
        if isinstance(msg, dict) and "id" in msg:
            slot = _slot(msg)
            if slot is not None:
                self.recording[msg["id"]] = slot

    def observe_answer(self, obj: dict[str, Any]) -> bool:
        """Called for every frame the SDK writes; False to drop it (already answered)."""
        rid = obj.get("id")
        if rid is None or ("result" not in obj and "error" not in obj):
            return True
        slot = self.recording.pop(rid, None)
        if slot is not None and "result" in obj:
            self.cache.put(slot, obj["result"])
            self.cache.save()
        if rid in self.suppress:
            self.suppress.discard(rid)
            return False
        return True


def serve(ops_root: str, consent_mode: str | None, db_url: str | None, *, allow: list[str] | None = None,
          log_format: str = "text") -> int:
    from registry.stdio_guard import claim_stdout

    claim = claim_stdout()
    # unbuffered: after the hand-over the event loop reads the same descriptor, so no frame may sit
    # in a Python buffer (the fast path reads only a few small frames this way)
    rd = os.fdopen(claim.stdin_fd, "rb", buffering=0, closefd=False)
    wr = os.fdopen(claim.protocol_fd, "wb", closefd=False)
    front = FastFront(rd, wr, cache_extra=",".join(sorted(allow or [])))
    ready = threading.Event()
    loaded: dict[str, Any] = {}

    def load() -> None:
        try:
            from coordinator.mcp.dispatch import ToolHost
            from coordinator.mcp.identity import stdio_client
            from coordinator.mcp.server import build_server

            host = ToolHost(ops_root=ops_root, consent_mode=consent_mode, db_url=db_url, rollout_signal=True,
                            allow=allow)
            loaded["host"] = host
            observe(host, log_format)
            loaded["server"] = build_server(host, client=stdio_client())  # named by the process that started us
        except BaseException as exc:  # noqa: BLE001 - reported on the main thread
            loaded["error"] = exc
        finally:
            ready.set()

    threading.Thread(target=load, name="dome-mcp-load", daemon=True).start()
    front.run(ready)
    ready.wait()
    if "error" in loaded:
        raise loaded["error"]
    if front.eof and not front.pending:
        return 0
    import anyio

    try:
        anyio.run(_serve_sdk, loaded["server"], front)
    finally:
        close_observation(loaded["host"])
    return 0


def observe(host: Any, log_format: str) -> None:
    """Each tool call's span (when OTEL_* asks for traces) and JSON log line (on stderr, when asked):
    the stdio door's calls are traced like the HTTP door's. Nothing is loaded when neither is on."""
    from coordinator.observe.tracing import tracing_wanted

    if log_format == "json" or tracing_wanted(os.environ):
        from coordinator.observe.mcp_door import instrument
        instrument(host, log_format=log_format)


def close_observation(host: Any) -> None:
    """The spans still in the exporter's batch leave before the process does."""
    door = getattr(host, "door_telemetry", None)
    if door is not None:
        door.close()


async def _serve_sdk(server: Any, front: FastFront) -> None:
    from registry.mcp_pipes import pipe_streams

    def keep(msg: Any) -> bool:
        return front.observe_answer(msg.message.model_dump(by_alias=True, mode="json", exclude_unset=True))

    async with pipe_streams(front.rd.fileno(), front.wr.fileno(), prelude=[*front.replay, *front.pending],
                            eof=front.eof, on_line=front.note_forwarded, keep=keep) as (read_recv, write_send):
        await server.run(read_recv, write_send, server.create_initialization_options())
