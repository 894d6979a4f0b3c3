"""Shared pieces of the agent tests: the runtime card and the scripted endpoint."""
from __future__ import annotations

import importlib.metadata
import importlib.util
from typing import Any

from tests.conftest import REPO_ROOT

HOST = "models.scripted.test"
MODEL = "scripted-1"
OPENAI_VERSION = importlib.metadata.version("openai")  # the card pins what this installation has
SCRIPTED_LLM = REPO_ROOT / "examples" / "agent-swarm" / "scripted_llm.py"


def card(**over: Any) -> dict[str, Any]:
    c = {"runtime_id": "openai-chat", "sdk": {"package": "openai", "version": OPENAI_VERSION}, "model": MODEL,
         "endpoint": {"host": HOST, "base_path": "/v1"}, "transport": {"timeout_s": 30, "max_retries": 0},
         "allow_models": [MODEL], "budgets": {"max_tokens": 20000}, "max_turns": 8, "max_output_tokens": 256,
         "temperature": 0, "seed": 7}
    c.update(over)
    return c


def load_scripted_llm() -> Any:
    spec = importlib.util.spec_from_file_location("dome_scripted_llm", SCRIPTED_LLM)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod.ScriptedLLM


def scripted_egress(llm: Any, monkeypatch: Any, env: str = "DOME_TEST_MODEL_KEY") -> tuple[Any, str]:
    """An egress configuration routing HOST to the scripted endpoint `llm`, and the
    random key the gate injects (set in this process's environment only)."""
    import secrets

    from coordinator.egress.config import EgressConfig

    key = "sk-dome-test-" + secrets.token_hex(20)
    monkeypatch.setenv(env, key)
    return EgressConfig.parse({"routes": {HOST: {
        "upstream": f"http://127.0.0.1:{llm.port}", "key_env": env,
        "prices": {MODEL: {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 4.0}}}}}), key


def agent_task(nid: str, agent_card: dict[str, Any], instructions: str, **extra: Any) -> dict[str, Any]:
    """A work-queue node of the `agent` intent with this card (one attempt unless `extra` says otherwise)."""
    return {"node_id": nid, "containers": [], "required_capabilities": ["read:repo", "write"],
            "required_outputs": ["patch_proposal"], "dependencies": [], "max_attempts": 1,
            "action_spec": {"intent": "agent", "params": {"card": agent_card, "instructions": instructions}},
            **extra}


def assert_pin_is_checked(make_card: Any, cli: Any, wrong: str) -> None:
    """The installed version of `cli` (registry.agent_clis.AgentCli) passes the card's pin
    check in its own directory; a card pinning `wrong` is refused, typed, naming both."""
    import pytest

    from worker_sdk.intents import agent

    assert agent.check_sdk(make_card()) == cli.version
    with pytest.raises(agent.RuntimeMismatch) as exc:
        agent.check_sdk(make_card(version=wrong))
    assert exc.value.code == "RUNTIME_SDK_MISMATCH"
    assert exc.value.details == {"package": cli.card_package, "pinned": wrong, "installed": cli.version,
                                 "install_dir": str(cli.install_dir)}
