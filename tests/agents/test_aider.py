"""A real agent CLI from PyPI in the agent slot: aider (pinned, in its own virtual
environment) runs inside the bubblewrap sandbox, its model traffic goes through the
loopback shim and the egress gate to the scripted endpoint, which answers in aider's
own edit format (SEARCH/REPLACE blocks); its edit becomes the promoted proposal.
A card pinning another aider version is refused with a typed error before it starts."""
from __future__ import annotations

import os

import pytest

from coordinator import runstate as rs
from coordinator.egress import metering as mt
from coordinator.runloop.finish import integration_finish
from registry.agent_clis import AIDER
from tests.agents.helpers import agent_task, assert_pin_is_checked, card, load_scripted_llm, scripted_egress
from tests.agents.test_agent_run import needs_bwrap
from tests.attacks import attack
from tests.conftest import git
from tests.runloop.conftest import run_queue, write_queue
from worker_sdk.intents import agent

needs_aider = pytest.mark.skipif(not AIDER.executable.exists() and not os.environ.get("CI"),
                                 reason=f"aider is not installed in {AIDER.install_dir} (bash scripts/install_agent_clis.sh)")

# aider's diff edit format: the file name, then a fenced SEARCH/REPLACE block
AIDER_REPLY = "README.md\n```\n<<<<<<< SEARCH\nhello\n=======\nhello, aider\n>>>>>>> REPLACE\n```\n"
SCRIPT = {"aider-fix": [{"content": AIDER_REPLY}]}


def aider_card(**sdk_over) -> dict:
    return card(runtime_id="aider", sdk={"package": AIDER.card_package, "version": AIDER.version,
                                         "install_dir": str(AIDER.install_dir), **sdk_over},
                transport={"timeout_s": 120, "max_retries": 0},
                cli={"argv": [str(AIDER.executable), "--model", "openai/{model}", "--edit-format", "diff",
                              "--no-git", "--yes-always", "--no-stream", "--no-pretty", "--no-fancy-input",
                              "--no-check-update", "--analytics-disable", "--no-show-model-warnings",
                              "--chat-history-file", "/dev/null", "--input-history-file", "/dev/null",
                              "--file", "README.md", "--message", "{instructions}"]})


def _aider_task(nid: str, **sdk_over) -> dict:
    return agent_task(nid, aider_card(**sdk_over), "[script:aider-fix] greet aider")


@attack("agent-runtime-swap")
@needs_aider
def test_the_aider_pin_is_checked_in_its_own_environment():
    assert_pin_is_checked(aider_card, AIDER, "0.1.0")
    with pytest.raises(agent.RuntimeMismatch) as exc:  # an environment without it
        agent.check_sdk(aider_card(install_dir="/nonexistent/dome-agents/aider"))
    assert exc.value.details["installed"] is None


@attack("agent-cli-argv-injection")
def test_cli_argv_fills_instructions_and_model_as_single_arguments():
    c = aider_card()
    argv = agent.cli_argv(c, "fix it; rm -rf / {model}")
    assert argv[argv.index("--message") + 1] == "fix it; rm -rf / {model}"  # one argument, not re-expanded
    assert argv[argv.index("--model") + 1] == "openai/scripted-1"


@attack("agent-runtime-swap")
@needs_bwrap
@needs_aider
@pytest.mark.slow
def test_aider_runs_in_the_sandbox_through_the_gate_and_is_promoted(git_repo, ops_root, ledger_env, tmp_path,
                                                                    monkeypatch):
    ledger = ledger_env[0]
    llm = load_scripted_llm()(SCRIPT).start()
    egress, key = scripted_egress(llm, monkeypatch)
    tasks = [_aider_task("aider"), _aider_task("aider-wrong-pin", version="0.1.0")]
    try:
        q = write_queue(tmp_path, git_repo, tasks, if_tasks_fail="promote_rest",
                        scheduling={"max_parallel": 2, "endgame_max_duplicates": 0, "default_timeout_s": 300})
        _, out = run_queue(q, ops_root, ledger_env, sandbox="bwrap", egress=egress, finish=integration_finish)
    finally:
        llm.stop()
    ev = ledger.events(out.run_id)
    ends = {e.node_id: e.payload for e in ev if e.topic == rs.TASK_COMPLETED}
    assert ends["aider"]["outcome"] == "succeeded", ends["aider"]
    assert ends["aider"]["summary"]["cli"] == str(AIDER.executable)
    # the pinned version is refused when another is installed: typed, before any model call
    assert ends["aider-wrong-pin"]["error"]["code"] == "RUNTIME_SDK_MISMATCH"
    assert out.status == "promoted"
    assert git(git_repo, "show", f"{out.promoted_ref}:README.md") == "hello, aider"
    assert git(git_repo, "ls-tree", "-r", "--name-only", out.promoted_ref).split() == ["README.md"]  # no aider files
    # aider's only model traffic was through the gate: metered once, keyed by the gate, the key nowhere stored
    calls = [e for e in ev if e.topic == mt.CALL_TOPIC]
    assert [c.node_id for c in calls] == ["aider"] and len(llm.requests) == 1
    assert llm.requests[0]["headers"]["authorization"] == f"Bearer {key}"
    assert calls[0].payload["model"] == "scripted-1" and calls[0].payload["tokens_in"] > 0
    assert key.encode() not in b"".join(p.read_bytes() for p in ops_root.rglob("*") if p.is_file())
