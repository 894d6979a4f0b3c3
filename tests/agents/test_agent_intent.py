"""The agent intent's pieces that need no model: per-grant tools, the SDK pin, checkout tools."""
from __future__ import annotations

import json

import pytest

from coordinator.grants import issue_profile
from registry.contracts import default_registry
from registry.signing import SigningKey
from tests.agents.helpers import OPENAI_VERSION, card
from tests.conftest import git
from worker_sdk.intents import agent


def _methods(caps: list[str]) -> list[str]:
    g = issue_profile(key=SigningKey.generate(), run_id="r", wave_id="w", node_id="n", node_execution_id="ne",
                      required_capabilities=caps)
    return list(g.payload["allowed_methods"])


def test_tools_are_the_grants_own_methods_with_registry_schemas():
    full = agent.agent_tools(_methods(["read:repo", "write"]))
    assert [t["function"]["name"] for t in full] == ["grep", "list_tree", "read_file", "submit_patch"]
    read = next(t["function"] for t in full if t["function"]["name"] == "read_file")
    contract = default_registry().schema(default_registry().method("read_file").input)
    assert read["parameters"]["required"] == contract["required"] == ["path"]
    assert read["parameters"]["additionalProperties"] is False
    # a write-only grant offers the model no way to read: only submit_patch
    assert [t["function"]["name"] for t in agent.agent_tools(_methods(["write"]))] == ["submit_patch"]


def test_tool_calls_outside_the_grant_or_the_checkout_go_back_as_errors(git_repo):
    tools = agent.agent_tools(["read_file", "submit_patch"])
    assert agent._call_tool(git_repo, "grep", '{"pattern": "x"}', tools)["error"]["code"] == "OUT_OF_PROFILE"
    assert agent._call_tool(git_repo, "read_file", '{"path": "../x"}', tools)["error"]["code"] == "PATH_DENIED"
    assert agent._call_tool(git_repo, "read_file", '{"path": ".git/config"}', tools)["error"]["code"] == "PATH_DENIED"
    bad = "--- a/../../etc/passwd\n+++ b/../../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n"
    assert agent._call_tool(git_repo, "submit_patch", json.dumps({"diff": bad}), tools)["error"]["code"] == "PATCH_INVALID"
    assert agent._call_tool(git_repo, "read_file", '{"path": "README.md"}', tools)["content"] == "hello\n"
    assert git(git_repo, "status", "--porcelain") == ""


def test_sdk_version_other_than_the_card_pin_refuses_to_start():
    assert agent.check_sdk(card()) == OPENAI_VERSION
    with pytest.raises(agent.RuntimeMismatch) as exc:
        agent.check_sdk(card(sdk={"package": "openai", "version": "1.0.0"}))
    assert exc.value.code == "RUNTIME_SDK_MISMATCH" and exc.value.details["installed"] == OPENAI_VERSION
    with pytest.raises(agent.RuntimeMismatch):  # an agent CLI's Python package is checked the same way
        agent.check_sdk(card(sdk={"package": "aider-chat", "version": "0.1.0"}, cli={"argv": ["aider"]}))
    assert agent.check_sdk(card(sdk={"package": "npm:@scope/agent-cli", "version": "1.2.3"}, cli={"argv": ["x"]})) is None


def test_a_card_for_another_package_needs_a_cli():
    from registry.agent_card import RuntimeCardInvalid, check_card

    with pytest.raises(RuntimeCardInvalid):
        check_card(card(sdk={"package": "aider-chat", "version": "0.1.0"}))
    assert check_card(card(sdk={"package": "aider-chat", "version": "0.1.0"}, cli={"argv": ["aider"]}))["cli"]


def test_work_queue_with_a_bad_card_is_refused_before_any_work(tmp_path, git_repo):
    from coordinator.workqueue import WorkQueueError, load_work_queue
    from tests.runloop.conftest import write_queue

    task = {"node_id": "a", "containers": [], "required_capabilities": ["write"], "required_outputs": [],
            "dependencies": [], "action_spec": {"intent": "agent", "params": {
                "card": {**card(), "api_key": "sk-nope"}, "instructions": "x"}}}
    with pytest.raises(WorkQueueError) as exc:
        load_work_queue(write_queue(tmp_path, git_repo, [task]))
    assert exc.value.code == "RUNTIME_CARD_INVALID" and exc.value.details["at"] == "/tasks/0/action_spec"


def test_bad_or_missing_egress_configuration_is_refused_before_anything_is_created(tmp_path, git_repo):
    from tests.conftest import dome_cli
    from tests.runloop.conftest import cmd_task, write_queue

    q = write_queue(tmp_path, git_repo, [cmd_task("a", "true")])
    (tmp_path / "eg.json").write_text('{"routes": {"Not A Host": {"key_env": "K"}}}')
    r = dome_cli("run", str(q), "--ops-root", str(tmp_path / "ops"), "--egress", str(tmp_path / "eg.json"), "--json")
    assert r.returncode == 2 and json.loads(r.stdout)["error"]["code"] == "EGRESS_CONFIG_INVALID"
    assert not (tmp_path / "ops").exists()
    # agent nodes with no egress configuration at all could reach no model: refused up front too
    agent_task = {"node_id": "a", "containers": [], "required_capabilities": ["read:repo", "write"],
                  "required_outputs": [], "dependencies": [],
                  "action_spec": {"intent": "agent", "params": {"card": card(), "instructions": "x"}}}
    (tmp_path / "b").mkdir()
    q2 = write_queue(tmp_path / "b", git_repo, [agent_task])
    r = dome_cli("run", str(q2), "--ops-root", str(tmp_path / "ops"), "--json")
    assert r.returncode == 2 and json.loads(r.stdout)["error"]["code"] == "EGRESS_NOT_CONFIGURED"
    assert json.loads(r.stdout)["error"]["details"]["nodes"] == ["a"] and not (tmp_path / "ops").exists()
