"""A Node agent CLI from npm in the agent slot: Qwen Code (pinned, in its own npm
prefix) runs inside the bubblewrap sandbox. It asks for a streamed reply; the
loopback shim sends the request to the egress gate unstreamed (the gate meters
whole replies) and hands the CLI the reply as a server-sent-event stream. The
scripted endpoint answers with the CLI's own `write_file` tool call; the edit is
promoted, and a card pinning another version is refused before the CLI starts."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator import runstate as rs
from coordinator.egress import metering as mt
from coordinator.runloop.finish import integration_finish
from registry.agent_clis import QWEN_CODE
from tests.agents.helpers import agent_task, assert_pin_is_checked, card, load_scripted_llm, scripted_egress
from tests.agents.test_agent_run import needs_bwrap
from tests.attacks import attack
from tests.conftest import git
from tests.runloop.conftest import run_queue, write_queue

needs_qwen = pytest.mark.skipif((not QWEN_CODE.executable.exists() or not shutil.which("node"))
                                and not os.environ.get("CI"),
                                reason=f"Qwen Code is not installed in {QWEN_CODE.install_dir} "
                                       "(bash scripts/install_agent_clis.sh)")

SCRIPT = {"qwen-fix": [  # the CLI's own tools: it writes only a file it has read in this session
    {"tool_calls": [{"name": "read_file", "arguments": {"file_path": "/dome/scratch/repo/README.md"}}]},
    {"tool_calls": [{"name": "write_file", "arguments": {"file_path": "/dome/scratch/repo/README.md",
                                                         "content": "hello, qwen\n"}}]},
    {"content": "README.md now greets qwen."}]}


def qwen_card(**sdk_over) -> dict:
    return card(runtime_id="qwen-code", sdk={"package": QWEN_CODE.card_package, "version": QWEN_CODE.version,
                                             "install_dir": str(QWEN_CODE.install_dir), **sdk_over},
                transport={"timeout_s": 120, "max_retries": 0}, budgets={"max_tokens": 600000},
                cli={"argv": [str(QWEN_CODE.executable), "--auth-type", "openai", "--model", "{model}",
                              "--approval-mode", "yolo", "{instructions}"],
                     "env": {"QWEN_CODE_SUPPRESS_YOLO_WARNING": "1"}})


def _qwen_task(nid: str, **sdk_over) -> dict:
    return agent_task(nid, qwen_card(**sdk_over), "[script:qwen-fix] greet qwen")


@attack("agent-runtime-swap")
@needs_qwen
def test_the_npm_pin_is_checked_in_its_own_prefix():
    assert_pin_is_checked(qwen_card, QWEN_CODE, "0.0.1")


@needs_bwrap
@needs_qwen
@pytest.mark.slow
def test_qwen_code_runs_in_the_sandbox_through_the_gate_and_is_promoted(git_repo, ops_root, ledger_env, tmp_path,
                                                                        monkeypatch):
    ledger = ledger_env[0]
    llm = load_scripted_llm()(SCRIPT).start()
    egress, key = scripted_egress(llm, monkeypatch)
    try:
        q = write_queue(tmp_path, git_repo, [_qwen_task("qwen")],
                        scheduling={"max_parallel": 1, "endgame_max_duplicates": 0, "default_timeout_s": 300})
        _, out = run_queue(q, ops_root, ledger_env, sandbox="bwrap", egress=egress, finish=integration_finish)
    finally:
        llm.stop()
    ev = ledger.events(out.run_id)
    ends = {e.node_id: e.payload for e in ev if e.topic == rs.TASK_COMPLETED}
    assert ends["qwen"]["outcome"] == "succeeded", ends["qwen"]
    assert out.status == "promoted"
    assert git(git_repo, "show", f"{out.promoted_ref}:README.md") == "hello, qwen"
    assert git(git_repo, "ls-tree", "-r", "--name-only", out.promoted_ref).split() == ["README.md"]
    # the CLI asked for streams; the gate saw whole requests (no stream field), each metered and keyed
    calls = [e for e in ev if e.topic == mt.CALL_TOPIC]
    assert len(calls) == len(llm.requests) >= 3
    assert all("stream" not in json.loads(r["body"]) for r in llm.requests)
    assert all(r["headers"]["authorization"] == f"Bearer {key}" for r in llm.requests)
    assert key.encode() not in b"".join(p.read_bytes() for p in ops_root.rglob("*") if p.is_file())


def test_the_shim_destreams_requests_and_streams_whole_replies_back():
    from worker_sdk.egress_shim import sse_from_completion, unstream_request

    body = json.dumps({"model": "m", "stream": True, "stream_options": {"include_usage": True},
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    sent, streamed, usage = unstream_request(body)
    assert streamed and usage and json.loads(sent) == {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    plain = json.dumps({"model": "m", "messages": []}).encode()
    assert unstream_request(plain) == (plain, False, False)  # an unstreamed request passes byte for byte
    assert unstream_request(b"not json") == (b"not json", False, False)
    reply = {"id": "c1", "object": "chat.completion", "created": 5, "model": "m",
             "choices": [{"index": 0, "finish_reason": "tool_calls",
                          "message": {"role": "assistant", "content": None, "tool_calls": [
                              {"id": "t0", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]}}],
             "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
    events = sse_from_completion(json.dumps(reply).encode(), include_usage=True).decode().split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    chunks = [json.loads(e[len("data: "):]) for e in events[:-2]]
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == "c1" for c in chunks)
    delta = chunks[0]["choices"][0]["delta"]
    assert delta["tool_calls"] == [{"index": 0, **reply["choices"][0]["message"]["tool_calls"][0]}]
    assert chunks[1]["choices"][0]["finish_reason"] == "tool_calls" and chunks[2]["usage"] == reply["usage"]
    # the official SDK reads it back as the same message
    import httpx
    import openai
    transport = httpx.MockTransport(lambda req: httpx.Response(
        200, headers={"content-type": "text/event-stream"},
        content=sse_from_completion(json.dumps(reply).encode(), include_usage=False)))
    client = openai.OpenAI(api_key="x", base_url="http://shim.test/v1", http_client=httpx.Client(transport=transport))
    with client.chat.completions.stream(model="m", messages=[{"role": "user", "content": "hi"}]) as stream:
        final = stream.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert (call.id, call.function.name, call.function.arguments) == ("t0", "f", "{\"a\": 1}")


JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.text(max_size=20))
JSON = st.recursive(JSON_LEAF, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                      st.dictionaries(st.text(max_size=8), kids, max_size=4)),
                    max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=8).filter(lambda k: k not in ("stream", "stream_options")), JSON,
                       max_size=6),
       st.sampled_from([None, True, False, "yes"]), st.one_of(st.none(), JSON))
def test_unstreaming_removes_only_the_stream_fields(req, stream, opts):
    from worker_sdk.egress_shim import unstream_request

    body = {**req, **({} if stream is None else {"stream": stream}),
            **({} if opts is None else {"stream_options": opts})}
    raw = json.dumps(body).encode()
    sent, streamed, _usage = unstream_request(raw)
    if stream is True:
        assert streamed and json.loads(sent) == req  # exactly the stream fields are gone
    else:
        assert not streamed and sent == raw  # anything else is forwarded byte for byte


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), st.text(max_size=200)),
       st.lists(st.tuples(st.text(min_size=1, max_size=10), st.text(max_size=60)), max_size=3),
       st.sampled_from(["stop", "tool_calls", "length"]))
def test_the_stream_carries_the_whole_message(content, calls, finish):
    from worker_sdk.egress_shim import sse_from_completion

    msg = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = [{"id": f"t{i}", "type": "function", "function": {"name": n, "arguments": a}}
                             for i, (n, a) in enumerate(calls)]
    reply = {"id": "c", "created": 1, "model": "m", "choices": [{"index": 0, "message": msg, "finish_reason": finish}]}
    events = sse_from_completion(json.dumps(reply).encode(), include_usage=False).decode().split("\n\n")
    chunks = [json.loads(e[len("data: "):]) for e in events if e.startswith("data: {")]
    assert events[-2] == "data: [DONE]"
    text, tool_calls, reason = None, {}, None
    for c in chunks:  # what a streaming client does: join the deltas
        for ch in c["choices"]:
            d = ch["delta"]
            if d.get("content") is not None:
                text = (text or "") + d["content"]
            for tc in d.get("tool_calls") or []:
                tool_calls[tc["index"]] = {k: v for k, v in tc.items() if k != "index"}
            reason = ch["finish_reason"] or reason
    assert text == content and reason == finish
    assert [tool_calls[i] for i in sorted(tool_calls)] == msg.get("tool_calls", [])
