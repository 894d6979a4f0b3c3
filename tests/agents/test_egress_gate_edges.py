"""The egress gate's edges: the request size limit to the byte (at the socket and in the
decision), whether a call used more than its reservation, and stopping the listener.
The scripted endpoint, grants and ledger are test_egress_gate's."""
from __future__ import annotations

import dataclasses
import http.server
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

from coordinator.egress import metering as mt
from coordinator.egress.gate import EgressGate
from registry.canonical import digest_bytes
from registry.toolprofile import PROOF_HEADER
from tests.agents.helpers import HOST, MODEL, card
from tests.agents.test_egress_gate import RUN, _chat, _post, env, llm  # noqa: F401 - env and llm are fixtures
from worker_sdk.intents.agent import make_client

PATH = "/v1/chat/completions"


def _gate(env: dict, sock: Path, environ: dict | None = None, **config: Any) -> EgressGate:
    """A second gate of the same run (verifier, ledger, routes), its configuration changed."""
    g = env["gate"]
    return EgressGate(run_id=RUN, verifier=g.verifier, config=dataclasses.replace(g.config, **config),
                      transact=g.transact, blobs=g.blobs, socket_path=sock, environ=environ)


def _handle(gate: EgressGate, gw: Any, body: bytes) -> tuple[int, dict]:
    """One correctly signed request straight to the gate's decision (no socket)."""
    headers = {"host": HOST, "authorization": f"Bearer {gw.token}",
               PROOF_HEADER: gw.proof("egress", {"host": HOST, "path": PATH, "body_digest": digest_bytes(body)})}
    status, _, reply = gate.handle("POST", PATH, headers, body)
    return status, json.loads(reply)


def _calls(env: dict) -> list[dict]:
    return [e.payload for e in env["ledger"].events(RUN) if e.topic == mt.CALL_TOPIC]


def test_a_request_of_exactly_the_size_limit_is_forwarded_and_one_byte_more_is_refused(env, tmp_path: Path):
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "[script:chat] hi"}]}).encode()
    gate = _gate(env, tmp_path / "small.sock", max_request_bytes=len(body))
    gate.start()
    try:
        gw = env["attempt"]("ne-a")
        out = _post({**env, "sock": str(gate.socket_path)}, gw, PATH, body)
        assert out.startswith(b"HTTP/1.1 200"), out[:300]
        before = len(env["llm"].requests)
        over = body + b" "  # still the same JSON request, one byte longer
        out = _post({**env, "sock": str(gate.socket_path)}, gw, PATH, over)  # refused at the socket
        assert out.startswith(b"HTTP/1.1 413") and b"EGRESS_REQUEST_TOO_LARGE" in out
        status, reply = _handle(gate, gw, over)  # and by the decision itself
        assert status == 413 and reply["error"]["code"] == "EGRESS_REQUEST_TOO_LARGE"
        assert len(env["llm"].requests) == before
    finally:
        gate.stop()


def test_a_call_is_over_its_reservation_only_when_it_used_more_and_its_latency_is_its_own(env):
    """A reply without usage is charged exactly its reservation: not over it. A reply that
    reports more output than the whole reservation (an upstream ignoring the cap) is over it.
    The latency recorded is the upstream's, so never more than the whole call took."""
    gw = env["attempt"]("ne-a", budgets={"max_tokens": 10**7})
    client = make_client(card(budgets={"max_tokens": 10**7}), gw, env["sock"]).with_options(max_retries=0)
    original = env["llm"].reply

    def usage(u: dict | None):
        def reply(path, body):
            out = {k: v for k, v in original(path, body)[1].items() if k != "usage"}
            return 200, (out if u is None else {**out, "usage": u})
        return reply

    env["llm"].reply = usage(None)
    t0 = time.monotonic()
    _chat(client, max_completion_tokens=100)
    took_ms = (time.monotonic() - t0) * 1000
    env["llm"].reply = usage({"prompt_tokens": 1, "completion_tokens": 10**6})
    _chat(client, max_completion_tokens=100)
    exact, over = _calls(env)
    assert exact["usage_reported"] is False and exact["over_reservation"] is False
    assert (over["usage_reported"], over["tokens_in"], over["tokens_out"]) == (True, 1, 10**6)
    assert over["over_reservation"] is True
    assert 0 < exact["latency_ms"] <= took_ms  # the upstream's time, within the call's own


def test_stop_ends_the_listener_and_is_harmless_before_start(env, tmp_path: Path):
    gate = _gate(env, tmp_path / "stop.sock")
    gate.stop()  # never started: nothing to stop
    gate.start()
    thread = gate._thread
    assert thread is not None and thread.is_alive() and gate.socket_path.exists()
    assert thread.daemon  # a gate left running never holds up the coordinator's exit
    gate.stop()
    assert not thread.is_alive() and not gate.socket_path.exists()


def test_a_route_whose_key_is_missing_from_the_environment_forwards_nothing(env, tmp_path: Path):
    gate = _gate(env, tmp_path / "nokey.sock", environ={})  # the route names DOME_TEST_MODEL_KEY; it is unset
    gw = env["attempt"]("ne-a")
    before = len(env["llm"].requests)
    status, reply = _handle(gate, gw, json.dumps({"model": MODEL, "messages": []}).encode())
    assert status == 503 and reply["error"]["code"] == "EGRESS_KEY_UNAVAILABLE"
    assert reply["error"]["dome_error"]["details"]["key_env"] == "DOME_TEST_MODEL_KEY"
    assert len(env["llm"].requests) == before


def test_a_model_refusal_names_the_model_asked_for_and_the_allowlist(env):
    gw = env["attempt"]("ne-a")
    for model, named in (("gpt-expensive", "gpt-expensive"), (7, None)):
        status, reply = _handle(env["gate"], gw, json.dumps({"model": model, "messages": []}).encode())
        details = reply["error"]["dome_error"]["details"]
        assert status == 403 and reply["error"]["code"] == "EGRESS_MODEL_NOT_ALLOWED"
        assert details == {"model": named, "allow_models": [MODEL]}


def test_a_declared_oversize_request_is_refused_before_its_body_is_read(env, tmp_path: Path):
    """The socket refuses a Content-Length past the limit (or one that is not a number) at
    once and closes the connection: it never waits for, or reads, such a body."""
    gate = _gate(env, tmp_path / "frame.sock", max_request_bytes=1000)
    gate.start()
    try:
        for length in (b"1001", b"abc"):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            s.connect(str(gate.socket_path))
            s.sendall(b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %s\r\n\r\n" % (PATH.encode(), HOST.encode(),
                                                                                         length))
            out = b""
            while chunk := s.recv(65536):  # to EOF: the gate closes the connection after its answer
                out += chunk
            s.close()
            assert out.startswith(b"HTTP/1.1 413") and b"EGRESS_REQUEST_TOO_LARGE" in out, (length, out[:200])
            head = out.split(b"\r\n\r\n", 1)[0].lower()  # the refusal's own headers go out with it
            assert b"\r\ncontent-type: application/json" in head and b"\r\nx-should-retry: false" in head
    finally:
        gate.stop()


def test_the_upstreams_content_type_is_passed_on_and_defaults_to_json(env, tmp_path: Path):
    sent: list[str | None] = ["application/json; charset=utf-8", None]
    reply = json.dumps({"id": "x", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()

    class Upstream(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(200)
            ctype = sent.pop(0)
            if ctype is not None:
                self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *a: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        route = dataclasses.replace(env["gate"].config.routes[HOST], upstream=f"http://127.0.0.1:{server.server_port}")
        gate = _gate(env, tmp_path / "ctype.sock", routes={HOST: route})
        gw = env["attempt"]("ne-a")
        seen = []
        for _ in range(2):
            body = json.dumps({"model": MODEL, "messages": []}).encode()
            headers = {"host": HOST, "authorization": f"Bearer {gw.token}",
                       PROOF_HEADER: gw.proof("egress", {"host": HOST, "path": PATH, "body_digest": digest_bytes(body)})}
            status, out_headers, out = gate.handle("POST", PATH, headers, body)
            assert status == 200 and out == reply
            seen.append(out_headers["content-type"])
        assert seen == ["application/json; charset=utf-8", "application/json"]
    finally:
        server.shutdown()
        server.server_close()
