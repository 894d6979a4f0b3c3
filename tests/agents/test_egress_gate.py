"""The egress gate against a scripted OpenAI-compatible endpoint on loopback:
real grants and call proofs, the real OpenAI SDK, a real ledger and blobs."""
from __future__ import annotations

import json
import secrets
import socket
import threading
from pathlib import Path

import pytest

from coordinator.egress import metering as mt
from coordinator.egress.config import EgressConfig
from coordinator.egress.gate import EgressGate, ledger_transact
from coordinator.grants import GrantVerifier, issue_profile
from registry.canonical import digest_bytes
from registry.agent_card import RuntimeCardInvalid, check_card, grant_terms
from registry.signing import SigningKey
from tests.agents.helpers import HOST, MODEL, OPENAI_VERSION, card, load_scripted_llm
from worker_sdk.client import GatewayClient
from worker_sdk.intents.agent import make_client
from tests.attacks import attack

RUN = "run-egress"
OTHER = "other.scripted.test"


@pytest.fixture
def llm():
    server = load_scripted_llm()({"chat": [{"content": "hi", "completion_tokens": 40}] * 200,
                                  # bills every output token it is allowed: the cap the gate wrote
                                  "greedy": [{"content": "hi", "completion_tokens": 10**6}] * 200}).start()
    yield server
    server.stop()


@pytest.fixture
def env(tmp_path: Path, ops_root: Path, llm, monkeypatch):
    from coordinator.keys import load_keyring, load_or_create_signing_key
    from ledger import Ledger

    key = "sk-dome-test-" + secrets.token_hex(20)
    monkeypatch.setenv("DOME_TEST_MODEL_KEY", key)
    ledger = Ledger.open(None, ops_root)
    signer = load_or_create_signing_key(ops_root)
    verifier = GrantVerifier(load_keyring(ops_root), ledger)
    config = EgressConfig.parse({"routes": {HOST: {
        "upstream": f"http://127.0.0.1:{llm.port}", "key_env": "DOME_TEST_MODEL_KEY",
        "prices": {MODEL: {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 4.0}}},
        # routed by the coordinator, but in no grant of these tests
        OTHER: {"upstream": f"http://127.0.0.1:{llm.port}", "key_env": "DOME_TEST_MODEL_KEY"}}})
    sock = tmp_path / "eg.sock"
    gate = EgressGate(run_id=RUN, verifier=verifier, config=config, transact=ledger_transact(ledger),
                      blobs=ledger.blobs, socket_path=sock)
    gate.start()

    def attempt(neid: str, node: str = "agent-a", **card_over):
        wk = SigningKey.generate()
        g = issue_profile(key=signer, run_id=RUN, wave_id="w1", node_id=node, node_execution_id=neid,
                          required_capabilities=["write"], worker_public_key=wk.public.raw,
                          egress=grant_terms(card(**card_over)))
        verifier.bind_call_key(g.jti, wk)  # as the run loop does at attempt start
        return GatewayClient(token=g.token, profile=g.payload, socket="/nonexistent", worker_key=wk)

    yield {"ledger": ledger, "gate": gate, "sock": str(sock), "attempt": attempt, "key": key, "llm": llm}
    gate.stop()
    ledger.close()


def _chat(client, model=MODEL, script="chat", **kw):
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": f"[script:{script}] hi"}],
                                          **kw)


def _raw(sock: str, data: bytes) -> bytes:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(sock)
    s.sendall(data)
    out = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    s.close()
    return out


def test_allowed_call_is_forwarded_with_the_key_metered_and_recorded(env):
    gw = env["attempt"]("ne-a")
    client = make_client(card(), gw, env["sock"])
    resp = _chat(client)
    assert resp.choices[0].message.content == "hi"
    up = env["llm"].requests[-1]
    assert up["headers"]["authorization"] == f"Bearer {env['key']}"  # the gate added the key ...
    assert gw.token not in json.dumps(up["headers"])                   # ... and dropped the grant
    ev = [e for e in env["ledger"].events(RUN) if e.topic == mt.CALL_TOPIC]
    assert len(ev) == 1
    call = ev[0].payload
    body = up["body"]
    assert (call["tokens_in"], call["tokens_out"]) == (len(body) // 4, 40)
    assert call["cost_micros"] == len(body) // 4 * 1 + 40 * 4
    assert call["model"] == MODEL and call["latency_ms"] > 0 and ev[0].node_id == "agent-a"
    # the exact request the upstream got and the reply are blobs by digest: replayable
    assert env["ledger"].blobs.get(call["request_digest"]) == body
    assert json.loads(env["ledger"].blobs.get(call["response_digest"]))["usage"]["completion_tokens"] == 40
    assert json.loads(body)["max_completion_tokens"] >= 1  # the gate capped the output


@attack("egress-escape")
def test_host_model_method_and_grant_refusals_are_typed_and_never_forwarded(env):
    gw = env["attempt"]("ne-a")
    before = len(env["llm"].requests)
    with pytest.raises(Exception) as exc:  # a DNS name not on the allowlist
        _chat(make_client(card(endpoint={"host": "api.evil.example", "base_path": "/v1"}), gw, env["sock"]))
    assert exc.value.body["dome_error"]["code"] == "EGRESS_HOST_NOT_ALLOWED"
    with pytest.raises(Exception) as exc:  # a host the coordinator routes, but not this grant
        _chat(make_client(card(endpoint={"host": OTHER, "base_path": "/v1"}), gw, env["sock"]))
    assert exc.value.body["dome_error"]["code"] == "EGRESS_HOST_NOT_ALLOWED"
    assert exc.value.body["dome_error"]["details"]["routed"] is True
    with pytest.raises(Exception) as exc:  # a model not on the card's allowlist
        _chat(make_client(card(), gw, env["sock"]), model="gpt-expensive")
    assert exc.value.body["dome_error"]["code"] == "EGRESS_MODEL_NOT_ALLOWED"
    # CONNECT to another host through the gate: refused, the connection closed, no tunnel
    out = _raw(env["sock"], b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\nGET / HTTP/1.0\r\n\r\n"
               % (env["llm"].port, env["llm"].port))
    assert out.startswith(b"HTTP/1.1 405") and b"EGRESS_METHOD_NOT_ALLOWED" in out
    # an absolute-form proxy request to another host, properly signed, is a host refusal too
    body = json.dumps({"model": MODEL, "messages": []}).encode()
    proof = gw.proof("egress", {"host": "127.0.0.1", "path": "/v1/chat/completions", "body_digest": digest_bytes(body)})
    out = _raw(env["sock"], b"POST http://127.0.0.1:%d/v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
               b"Authorization: Bearer %s\r\ndome-call-proof: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
               % (env["llm"].port, env["llm"].port, gw.token.encode(), proof.encode(), len(body), body))
    assert out.startswith(b"HTTP/1.1 403") and b"EGRESS_HOST_NOT_ALLOWED" in out
    # the grant without its worker key's proof is refused by the grants verifier
    bare = GatewayClient(token=gw.token, profile={**gw.profile}, socket="/x", worker_key=gw._worker_key)
    bare.proof = lambda *a, **k: None  # type: ignore[method-assign]
    with pytest.raises(Exception) as exc:
        _chat(make_client(card(), bare, env["sock"]))
    assert exc.value.body["dome_error"]["code"] == "GRANT_PROOF_MISSING"
    assert len(env["llm"].requests) == before  # nothing of the above reached the upstream
    topics = [e.topic for e in env["ledger"].events(RUN)]
    assert topics.count(mt.REFUSED_TOPIC) == 5 and "grant.rejected" in topics and mt.CALL_TOPIC not in topics


@attack("egress-key-theft")
def test_the_key_never_reaches_the_worker_or_the_ledger_even_when_the_upstream_echoes_it(env, ops_root):
    gw = env["attempt"]("ne-a")
    llm = env["llm"]
    original = llm.reply
    llm.reply = lambda path, body: (200, {**original(path, body)[1], "echo": llm.requests[-1]["headers"]})
    resp = _chat(make_client(card(), gw, env["sock"]))
    key = env["key"].encode()
    assert llm.requests[-1]["headers"]["authorization"].endswith(env["key"])  # it did echo the real key
    assert key not in json.dumps(resp.model_dump()).encode()
    assert b"[redacted]" in json.dumps(resp.model_dump()).encode()
    db = b"".join(p.read_bytes() for p in ops_root.rglob("*") if p.is_file())
    assert key not in db and env["key"][-20:].encode() not in db


@attack("egress-budget-race")
def test_two_attempts_racing_cannot_overspend_the_node_token_budget(env):
    budget = 4000
    a, b = env["attempt"]("ne-a", budgets={"max_tokens": budget}), env["attempt"]("ne-b", budgets={"max_tokens": budget})
    results: dict[str, list[str]] = {"ok": [], "refused": []}
    lock = threading.Lock()

    start = threading.Barrier(2)

    def hammer(gw, barrier=None):
        client = make_client(card(budgets={"max_tokens": budget}), gw, env["sock"])
        if barrier is not None:
            barrier.wait(30)  # both attempts start calling together
        for _ in range(60):
            try:
                _chat(client, script="greedy", max_completion_tokens=200)
                with lock:
                    results["ok"].append(gw.neid)
            except Exception as exc:  # noqa: BLE001
                body = getattr(exc, "body", None)
                code = body["dome_error"]["code"] if isinstance(body, dict) else f"{type(exc).__name__}: {exc}"
                with lock:
                    results["refused"].append(code)
                if code == "BUDGET_EXHAUSTED":
                    return

    threads = [threading.Thread(target=hammer, args=(g, start)) for g in (a, b)]
    [t.start() for t in threads]
    [t.join(60) for t in threads]
    assert set(results["refused"]) == {"BUDGET_EXHAUSTED"} and len(results["refused"]) == 2, results
    assert {"ne-a", "ne-b"} <= set(results["ok"]), results  # both attempts really raced for the same budget
    # a retry of the node spends what the settled calls left (reservations are larger than usage) ...
    hammer(env["attempt"]("ne-c", budgets={"max_tokens": budget}))
    assert results["refused"][-1] == "BUDGET_EXHAUSTED"
    calls = [e.payload for e in env["ledger"].events(RUN) if e.topic == mt.CALL_TOPIC]
    reserved = [e.payload for e in env["ledger"].events(RUN) if e.topic == mt.RESERVED_TOPIC]
    spent = sum(c["tokens_in"] + c["tokens_out"] for c in calls)
    assert spent <= budget
    by_id = {r["reservation_id"]: r for r in reserved}
    assert len(reserved) == len(calls) and all(
        c["tokens_in"] + c["tokens_out"] <= by_id[c["reservation_id"]]["tokens_reserved"] for c in calls)
    # the running account every event carries is the fold of all of them (an audit), open reservations included
    evs = [e.payload for e in env["ledger"].events(RUN) if e.topic in mt.ACCOUNT_TOPICS]
    for i in range(1, len(evs) + 1):
        running, folded = mt.Account.from_snapshot(evs[i - 1]["account_after"]), mt.fold_account(evs[:i])
        assert (running.tokens, running.cost_micros, running.calls, dict(running.open)) == \
            (folded.tokens, folded.cost_micros, folded.calls, dict(folded.open))
    assert mt.Account.from_snapshot(evs[-1]["account_after"]).tokens == spent
    # ... and no attempt of it gets past the node's account afterwards
    with pytest.raises(Exception) as exc:
        _chat(make_client(card(), env["attempt"]("ne-d", budgets={"max_tokens": budget}), env["sock"]),
              script="greedy", max_completion_tokens=200)
    assert exc.value.body["dome_error"]["code"] == "BUDGET_EXHAUSTED"
    assert exc.value.body["dome_error"]["details"]["used"] == spent


def test_reservation_bounds_the_call_and_refuses_what_cannot_fit():
    price = mt.Price.parse({"input_usd_per_mtok": 2, "output_usd_per_mtok": 10})
    r = mt.reserve(account=mt.Account(tokens=900), budgets={"max_tokens": 1000}, request_bytes=60,
                   requested_cap=500, price=price)
    assert (r.tokens_in_bound, r.output_cap, r.tokens, r.cost_micros) == (60, 40, 100, 60 * 2 + 40 * 10)
    assert mt.reserve(account=mt.Account(tokens=950), budgets={"max_tokens": 1000}, request_bytes=60,
                      requested_cap=None, price=price)["budget"] == "max_tokens"
    assert mt.reserve(account=mt.Account(cost_micros=990), budgets={"max_tokens": 10**6, "max_model_cost_micros": 1000},
                      request_bytes=6, requested_cap=None, price=price)["budget"] == "max_model_cost_micros"
    acct = mt.fold_account([{"reservation_id": "r1", "tokens_reserved": 100, "cost_micros_reserved": 7},
                            {"reservation_id": "r2", "tokens_reserved": 50, "cost_micros_reserved": 3},
                            {"reservation_id": "r1", "tokens_in": 10, "tokens_out": 20, "cost_micros": 2}])
    assert (acct.tokens, acct.cost_micros, acct.calls, acct.open_reservations) == (80, 5, 1, 1)


def test_runtime_card_is_closed_and_its_model_must_be_on_its_allowlist():
    assert check_card(card())["sdk"] == {"package": "openai", "version": OPENAI_VERSION}
    with pytest.raises(RuntimeCardInvalid):
        check_card({**card(), "api_key": "sk-x"})  # no credential field in a card
    with pytest.raises(RuntimeCardInvalid):
        check_card({**card(), "model": "other"})
    assert grant_terms(card()) == {"allow_hosts": [HOST], "allow_models": [MODEL], "budgets": {"max_tokens": 20000}}


def _post(env, gw, path: str, body: bytes) -> bytes:
    """A correctly signed POST of `path` on the allowed host, straight to the gate's socket."""
    proof = gw.proof("egress", {"host": HOST, "path": path, "body_digest": digest_bytes(body)})
    return _raw(env["sock"], b"POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\ndome-call-proof: %s\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                % (path.encode(), HOST.encode(), gw.token.encode(), proof.encode(), len(body), body))


def test_only_the_routes_operations_are_forwarded(env):
    """The host and model are allowed; a path that is not one of the route's operations is
    refused before anything reaches the upstream (its files, its admin API, a lookalike)."""
    gw = env["attempt"]("ne-a")
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "[script:chat] hi"}]}).encode()
    before = len(env["llm"].requests)
    for path in ("/v1/files", "/v1/chat/completions/x", "/v1/chat/completion", "/v2/chat/completions",
                 "/v1/chat/completions/../files", "/"):
        out = _post(env, gw, path, body)
        assert out.startswith(b"HTTP/1.1 403") and b"EGRESS_OPERATION_NOT_ALLOWED" in out, (path, out[:300])
    assert len(env["llm"].requests) == before
    _post(env, gw, "/v1/chat/completions?trace=1", body)  # the query is not part of the operation: forwarded
    assert len(env["llm"].requests) == before + 1
    assert env["llm"].requests[-1]["path"] == "/v1/chat/completions?trace=1"


@pytest.mark.parametrize("status", [200, 500])
def test_a_reply_without_usage_is_charged_its_whole_reservation(env, status):
    """Whatever the status, a reply that reports no usage costs the whole reservation:
    a provider that does not say what it billed is never taken to have billed nothing."""
    gw = env["attempt"]("ne-a", budgets={"max_tokens": 5000})
    env["llm"].reply = lambda path, body: (status, {"id": "x", "object": "chat.completion", "model": MODEL,
                                                    "choices": [{"index": 0, "finish_reason": "stop",
                                                                 "message": {"role": "assistant", "content": "hi"}}]})
    client = make_client(card(budgets={"max_tokens": 5000}), gw, env["sock"]).with_options(max_retries=0)
    try:
        _chat(client, max_completion_tokens=100)
    except Exception:  # noqa: BLE001 - the 500 reaches the caller as the SDK's error
        assert status != 200
    calls = [e.payload for e in env["ledger"].events(RUN) if e.topic == mt.CALL_TOPIC]
    reserved = {e.payload["reservation_id"]: e.payload for e in env["ledger"].events(RUN) if e.topic == mt.RESERVED_TOPIC}
    assert len(calls) == 1 and calls[0]["status"] == status and calls[0]["usage_reported"] is False
    charged = calls[0]["tokens_in"] + calls[0]["tokens_out"]
    assert charged == reserved[calls[0]["reservation_id"]]["tokens_reserved"] and calls[0]["tokens_out"] == 100
    assert mt.Account.from_snapshot(calls[0]["account_after"]).tokens == charged > 0
