#!/usr/bin/env python3
"""A local OpenAI-compatible chat completions server that replays scripted replies.

    python examples/agent-swarm/scripted_llm.py --script script.json [--port 0]

It stands in for a model provider where none is reachable: it listens on
127.0.0.1 only and answers `POST /v1/chat/completions` with the next reply
of a script. The script is chosen by a tag `[script:<name>]` in the
request's messages; the reply is the one for the number of assistant turns
the request holds after the first tagged message (so an agent CLI's
few-shot examples before its instructions do not count):

    {"fix-typo": [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}]},
        {"tool_calls": [{"name": "submit_patch", "arguments": {"diff": "..."}}]}]}

A reply may set `completion_tokens` (what its usage reports; default a
quarter of its JSON size). `prompt_tokens` is a quarter of the request
body's size. Every request is remembered (path, headers, body) so a test
can check what the upstream actually received.
"""
from __future__ import annotations

import argparse
import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TAG = re.compile(r"\[script:([A-Za-z0-9_.-]+)\]")


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, list):
        return " ".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return str(content or "")


class ScriptedLLM:
    def __init__(self, script: dict[str, list[dict[str, Any]]], *, port: int = 0) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        llm = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # headers and body go out at once

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                with llm._lock:
                    llm.requests.append({"path": self.path, "headers": dict(self.headers.items()), "body": body})
                status, reply = llm.reply(self.path, body)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def reply(self, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        if path.rstrip("/") != "/v1/chat/completions":
            return 404, {"error": {"message": f"no route {path}"}}
        req = json.loads(body)
        messages = req.get("messages", [])
        tagged = [i for i, m in enumerate(messages) if TAG.search(_text(m.get("content")))]
        tag = TAG.search(_text(messages[tagged[0]].get("content"))) if tagged else None
        turns = self.script.get(tag.group(1) if tag else "", [])
        # assistant turns after the tagged message: an agent CLI's few-shot examples before it do not count
        n = sum(1 for m in messages[(tagged[0] if tagged else 0):] if m.get("role") == "assistant")
        step = turns[n] if n < len(turns) else {"content": "done"}
        msg: dict[str, Any] = {"role": "assistant", "content": step.get("content")}
        if step.get("tool_calls"):
            msg["tool_calls"] = [{"id": f"call_{n}_{i}", "type": "function",
                                  "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}))}}
                                 for i, c in enumerate(step["tool_calls"])]
        out_tokens = int(step.get("completion_tokens", len(json.dumps(msg)) // 4))
        cap = req.get("max_completion_tokens") or req.get("max_tokens")
        if isinstance(cap, int):
            out_tokens = min(out_tokens, cap)  # a provider never bills more than the cap it was given
        return 200, {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()),
                     "model": req.get("model"),
                     "choices": [{"index": 0, "message": msg,
                                  "finish_reason": "tool_calls" if msg.get("tool_calls") else "stop"}],
                     "usage": {"prompt_tokens": len(body) // 4, "completion_tokens": out_tokens,
                               "total_tokens": len(body) // 4 + out_tokens}}

    def start(self) -> "ScriptedLLM":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--script", required=True)
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    with open(args.script) as fh:
        llm = ScriptedLLM(json.load(fh), port=args.port)
    print(f"scripted model endpoint on http://127.0.0.1:{llm.port}/v1", flush=True)
    llm.server.serve_forever()


if __name__ == "__main__":
    main()
