#!/usr/bin/env python3
"""The agent swarm with model-driven agents (the `agent` intent) against a scripted endpoint.

    python examples/agent-swarm/model_agents.py --agents model [--out DIR]

Creates the example repository, starts the scripted OpenAI-compatible server
(scripted_llm.py) on 127.0.0.1, routes the made-up host models.scripted.test
to it in an egress configuration (the key is a random value in the `dome
run` process's environment, never in the work queue), and runs ONE queue,
`model.queue.json`, with `dome run`:

- `fix-typo`: an agent that greps, reads textkit/core.py and fixes a typo
  through the gate -> promoted;
- `greedy`: an agent whose scripted model keeps calling until its token
  budget is spent -> stopped with BUDGET_EXHAUSTED;
- `wanderer`: an agent whose card names a host the coordinator does not
  route -> refused with EGRESS_HOST_NOT_ALLOWED;
- `fix-typo-readme`: a scripted (non-model) agent fixing the README -> promoted.

The queue sets `"if_tasks_fail": "promote_rest"`, so the run promotes the
rest beside the two stopped agents and says it is partial (`dome run` exits
7). It then checks the run with `dome verify`, and prints each stopped
agent's error code and the model usage per attempt and per run
from `dome report --json`.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
HOST, MODEL = "models.scripted.test", "scripted-1"
OPENAI_VERSION = importlib.metadata.version("openai")  # the card pins the SDK this installation has
TYPO_DIFF = """--- a/textkit/core.py
+++ b/textkit/core.py
@@ -4,3 +4,3 @@
 def slugify(text):
-    # lowercase, drop puncutation, join the words with dashes
+    # lowercase, drop punctuation, join the words with dashes
     words = []
"""
SCRIPT = {
    "fix-typo": [{"tool_calls": [{"name": "grep", "arguments": {"pattern": "puncutation"}}]},
                 {"tool_calls": [{"name": "read_file", "arguments": {"path": "textkit/core.py"}}]},
                 {"tool_calls": [{"name": "submit_patch", "arguments": {"diff": TYPO_DIFF}}]}],
    "greedy": [{"tool_calls": [{"name": "list_tree", "arguments": {}}], "completion_tokens": 10**6}] * 100,
}


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"agent_swarm_{name}", HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def card(**over) -> dict:
    c = {"runtime_id": "openai-chat", "sdk": {"package": "openai", "version": OPENAI_VERSION}, "model": MODEL,
         "endpoint": {"host": HOST, "base_path": "/v1"}, "transport": {"timeout_s": 60, "max_retries": 0},
         "allow_models": [MODEL], "budgets": {"max_tokens": 30000, "max_model_cost_micros": 200000},
         "max_turns": 10, "max_output_tokens": 512, "temperature": 0, "seed": 7}
    c.update(over)
    return c


def agent_node(nid: str, script: str, **card_over) -> dict:
    return {"node_id": nid, "containers": [], "dependencies": [], "required_capabilities": ["read:repo", "write"],
            "required_outputs": ["patch_proposal"], "risk": "low", "max_attempts": 1,
            "action_spec": {"intent": "agent", "params": {"card": card(**card_over),
                                                          "instructions": f"[script:{script}] {nid}"}}}


def queue(repo: Path, name: str, ref: str, tasks: list[dict]) -> dict:
    return {"artifact_kind": "dome.work.queue/v1", "name": name, "repo": str(repo), "base_ref": "main",
            "determinism_seed": 11, "policy": "default", "promote_to": ref, "if_tasks_fail": "promote_rest",
            "scheduling": {"max_parallel": 2, "default_timeout_s": 120}, "tasks": tasks,
            "validations": [{"suite": "command", "name": "tests", "argv": ["python3", "-m", "pytest", "-q"],
                             "required": True, "timeout_s": 120}]}


def script_node(nid: str, *argv: str) -> dict:
    """A scripted (non-model) agent of the example repository's tools/agent.py."""
    return {"node_id": nid, "containers": [], "dependencies": [], "required_capabilities": ["write"],
            "required_outputs": ["patch_proposal"], "risk": "low", "max_attempts": 1,
            "action_spec": {"intent": "command", "argv": ["python3", "tools/agent.py", *argv]}}


def dome(*args: str, env: dict[str, str]) -> dict:
    r = subprocess.run([sys.executable, "-m", "coordinator.cli.main", *args], env=env, capture_output=True,
                       text=True, timeout=600)
    if r.returncode not in (0, 1, 4, 5, 7):  # 1: verify found a problem; 4, 5, 7: how the run ended
        raise SystemExit(f"dome {args[0]} failed ({r.returncode}): {r.stderr[-2000:]}")
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise SystemExit(f"dome {args[0]} failed ({r.returncode}): {r.stderr[-2000:]}") from None


def failures(run_id: str, ops: Path, env: dict[str, str]) -> list[tuple[str, str]]:
    """(node, error code) of every failed attempt, from `dome events --json` (one JSON event a line)."""
    r = subprocess.run([sys.executable, "-m", "coordinator.cli.main", "events", run_id, "--ops-root", str(ops), "--json"],
                       env=env, capture_output=True, text=True, timeout=120)
    out = []
    for line in r.stdout.splitlines():
        ev = json.loads(line)
        p = ev.get("payload") or {}
        if ev.get("topic") == "task.completed" and p.get("outcome") == "failed":
            out.append((str(ev.get("node_id")), str((p.get("error") or {}).get("code"))))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", choices=["model"], required=True,
                    help="model: agents driven by a (scripted) model through the egress gate")
    ap.add_argument("--out", type=Path, default=None, help="working directory (default: a new temporary one)")
    args = ap.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="dome-model-agents-"))
    out.mkdir(parents=True, exist_ok=True)
    repo = _load("make_repo").make_repo(out / "repo", force=True)
    llm = _load("scripted_llm").ScriptedLLM(SCRIPT).start()
    try:
        (out / "egress.json").write_text(json.dumps({"routes": {HOST: {
            "upstream": f"http://127.0.0.1:{llm.port}", "key_env": "SCRIPTED_MODEL_KEY",
            "prices": {MODEL: {"input_usd_per_mtok": 0.5, "output_usd_per_mtok": 1.5}}}}}, indent=1))
        q = queue(repo, "model-agents", "refs/heads/dome/model-agents", [
            agent_node("fix-typo", "fix-typo"),
            agent_node("greedy", "greedy", budgets={"max_tokens": 6000}),
            agent_node("wanderer", "fix-typo", endpoint={"host": "api.unlisted.example", "base_path": "/v1"}),
            script_node("fix-typo-readme", "fix-typo", "recieve", "receive", "README.md")])
        env = {**os.environ, "SCRIPTED_MODEL_KEY": "sk-scripted-" + secrets.token_hex(16),
               "PYTHONPATH": str(HERE.parent.parent)}
        ops = out / "ops"
        (out / "model.queue.json").write_text(json.dumps(q, indent=1))
        res = dome("run", str(out / "model.queue.json"), "--ops-root", str(ops), "--egress", str(out / "egress.json"),
                   "--json", env=env)
        why = res.get("why") or {}
        print(f"model.queue.json: run {res['run_id']} {res['status']}" + (" (partial)" if why.get("partial") else "")
              + (f" -> {res.get('promoted_ref')}" if res.get("promoted_ref") else ""))
        for node, code in failures(res["run_id"], ops, env):
            print(f"  {node:<15} stopped: {code}")
        landed = sorted(set(q_node["node_id"] for q_node in q["tasks"])
                        - {t["node_id"] for t in why.get("tasks_not_landed", [])})
        if res["status"] == "promoted":
            print(f"  landed: {', '.join(landed)}")
        rep = dome("report", res["run_id"], "--ops-root", str(ops), "--json", env=env)
        usage = rep.get("model_usage") or {}
        for row in usage.get("attempts", []):
            print(f"  {row['node_id']:<15} {row['node_execution_id']}: {row['calls']} calls, "
                  f"{row['tokens_in']} in / {row['tokens_out']} out tokens, ${row['cost_micros'] / 1e6:.6f}")
        run = usage.get("run") or {}
        if run:
            print(f"  run total: {run['calls']} calls, {run['tokens_in']} in / {run['tokens_out']} out tokens, "
                  f"${run['cost_micros'] / 1e6:.6f}")
        ver = dome("verify", res["run_id"], "--ops-root", str(ops), "--json", env=env)
        print(f"  dome verify: {'valid' if ver.get('valid') else 'INVALID: ' + '; '.join(ver.get('reasons', []))}")
        ok = res["status"] == "promoted" and bool(ver.get("valid"))
    finally:
        llm.stop()
    print(f"ledger and artifacts: {ops}; inspect with `dome events RUN_ID --ops-root {ops}`")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
