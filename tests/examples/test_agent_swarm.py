"""The agent-swarm example end to end through the real CLI: seven scripted
coding agents edit one repository; their overlapping edits are reordered,
split and dropped, the one that breaks the tests is bisected out, the rest
is promoted and `dome verify` accepts the run."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, dome_cli, git

EXAMPLE = REPO_ROOT / "examples" / "agent-swarm"


def _make_repo(out: Path) -> Path:
    spec = importlib.util.spec_from_file_location("agent_swarm_make_repo", EXAMPLE / "make_repo.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod.make_repo(out)


def _promoted_run(tmp_path: Path, queue_name: str) -> tuple[Path, dict, Path, dict, list[dict]]:
    """`dome run` of one of the example's queues on a fresh repository; it must end promoted.
    Returns (repo, queue, ops root, the run's JSON, its events)."""
    repo = _make_repo(tmp_path / "repo")
    queue = json.loads((EXAMPLE / queue_name).read_text())
    queue["repo"] = str(repo)
    qfile = tmp_path / queue_name
    qfile.write_text(json.dumps(queue))
    ops = tmp_path / "ops"
    run = dome_cli("run", str(qfile), "--ops-root", str(ops), "--json", timeout=300)
    out = json.loads(run.stdout)
    assert run.returncode == 0 and out["status"] == "promoted", run.stderr[-3000:]
    ev = dome_cli("events", out["run_id"], "--ops-root", str(ops), "--json")
    assert ev.returncode == 0, ev.stderr
    return repo, queue, ops, out, [json.loads(line) for line in ev.stdout.splitlines() if line.strip()]


def test_scripted_agent_edits_are_deterministic(tmp_path: Path) -> None:
    """Each instruction makes the same edit every time; the good ones keep the
    repository's own tests passing, the "optimization" breaks them."""
    steps = {"refactor": ["refactor", "slugify", "textkit/core.py"],
             "docstrings": ["docstrings", "textkit/core.py"],
             "median": ["add-function", "median", "textkit/numbers.py", "tests/test_median.py"],
             "bug": ["optimize", "clamp", "textkit/numbers.py"]}
    good, bad = _make_repo(tmp_path / "good"), _make_repo(tmp_path / "bad")

    def agent(repo: Path, argv: list[str]) -> None:
        subprocess.run([sys.executable, "tools/agent.py", *argv], cwd=repo, check=True, capture_output=True)

    for name, argv in steps.items():
        if name != "bug":
            before = git(good, "diff")
            agent(good, argv)
            assert git(good, "diff") != before, name
    agent(bad, steps["bug"])
    diff_bug = git(bad, "diff")
    git(bad, "stash", "-q")
    agent(bad, steps["bug"])
    assert git(bad, "diff") == diff_bug  # same instruction, same edit
    for repo, ok in ((good, True), (bad, False)):
        tests = subprocess.run([sys.executable, "-m", "pytest", "-q"], cwd=repo, capture_output=True, text=True)
        assert (tests.returncode == 0) == ok, tests.stdout[-800:]


@pytest.mark.slow
def test_agent_swarm_run_reorders_splits_drops_bisects_and_promotes(tmp_path: Path) -> None:
    repo, queue, ops, out, events = _promoted_run(tmp_path, "work.queue.json")
    base = git(repo, "rev-parse", "main")
    run_id = out["run_id"]
    node_of = {e["payload"]["proposal_id"]: e["payload"]["node_id"] for e in events
               if e["topic"] == "integration.proposal_verified"}

    def node(pid: str) -> str:
        return node_of[pid.split(":split-")[0]]

    decisions = [(node(e["payload"]["proposal_id"]), e["payload"]["action"]) for e in events
                 if e["topic"] == "integration.conflict_decision"]
    assert {a for _, a in decisions} >= {"reorder", "split", "drop"}, decisions
    assert ("docstrings", "split") in decisions and ("fix-typo-core", "drop") in decisions
    assert sorted(decisions) == sorted([("fix-typo-core", "reorder"), ("docstrings", "reorder"),
                                        ("fix-typo-core", "drop"), ("docstrings", "split"),
                                        ("docstrings", "drop")])  # the split's remainder

    bisect = [e["payload"] for e in events if e["topic"] == "integration.bisect"]
    ejected = [e["payload"] for e in events if e["topic"] == "integration.ejected"]
    assert len(bisect) == 1 and [node(p) for p in bisect[0]["culprit_proposal_ids"]] == ["optimize-clamp"]
    assert bisect[0]["failing_suites"] == ["tests"]
    assert len(ejected) == 1 and [node(p) for p in ejected[0]["proposal_ids"]] == ["optimize-clamp"]
    assert not any(node(p) == "optimize-clamp" for p in out.get("included_proposals") or [])

    head = out["head"]
    assert git(repo, "rev-parse", queue["promote_to"]) == head
    included = git(repo, "log", "--format=%(trailers:key=Dome-Proposal,valueonly)", f"{base}..{head}").split()
    assert sorted(node(p) for p in included) == ["add-median", "docstrings", "fix-typo-readme",
                                                 "refactor-slugify"]
    # the promoted tree: the refactor, part of the docstrings, the new function; no bug
    core = git(repo, "show", f"{head}:textkit/core.py")
    numbers = git(repo, "show", f"{head}:textkit/numbers.py")
    assert "def slugify(text: str) -> str:" in core and "puncutation" not in core
    assert '"""Count the words of TEXT' in core and '"""Lowercase TEXT' not in core
    assert "def median(values):" in numbers and "max(hi, min(lo, value))" not in numbers
    assert "receive a review" in git(repo, "show", f"{head}:README.md")
    tree = tmp_path / "promoted"
    git(repo, "worktree", "add", "-q", "--detach", str(tree), head)
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q"], cwd=tree, capture_output=True, text=True)
    assert tests.returncode == 0 and "7 passed" in tests.stdout, tests.stdout[-1500:]

    ver = dome_cli("verify", run_id, "--ops-root", str(ops), "--json")
    assert ver.returncode == 0 and json.loads(ver.stdout)["valid"] is True, ver.stdout[-2000:]


@pytest.mark.slow
def test_model_agents_example_promotes_and_stops_typed(tmp_path: Path) -> None:
    """`model_agents.py --agents model`: ONE real CLI run with --egress against the scripted
    endpoint: one model-driven fix is promoted beside a scripted one, one agent is stopped
    with BUDGET_EXHAUSTED, one refused EGRESS_HOST_NOT_ALLOWED; the run is partial and valid."""
    r = subprocess.run([sys.executable, str(EXAMPLE / "model_agents.py"), "--agents", "model", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert r.returncode == 0, r.stderr[-2000:] + r.stdout[-2000:]
    out = r.stdout
    assert out.count("model.queue.json: run ") == 1  # one run, not one per outcome
    assert " promoted (partial) -> refs/heads/dome/model-agents" in out
    assert "greedy          stopped: BUDGET_EXHAUSTED" in out
    assert "wanderer        stopped: EGRESS_HOST_NOT_ALLOWED" in out
    assert "landed: fix-typo, fix-typo-readme" in out
    assert re.search(r"fix-typo +ne-\S+: 3 calls, \d+ in / \d+ out tokens, \$0\.\d+", out)
    assert re.search(r"greedy +ne-\S+: \d+ calls", out)
    assert out.count("run total:") == 1 and "dome verify: valid" in out
    promoted = "refs/heads/dome/model-agents"
    assert git(tmp_path / "repo", "show", f"{promoted}:textkit/core.py").count("punctuation") == 1
    assert "receive" in git(tmp_path / "repo", "show", f"{promoted}:README.md")


@pytest.mark.slow
def test_agent_swarm_canvas_resolves_a_conflict_and_starts_a_wave_from_the_head(tmp_path: Path) -> None:
    """canvas.queue.json: the same agents with in-run integration. The docstrings agent collides
    with the refactor; the part that applies lands, the rest goes to a resolver worker on the
    integration head instead of being dropped, and later waves start from the head. The events
    and the report tell that story; both intents are in the promoted tree and its tests pass."""
    repo, queue, ops, out, events = _promoted_run(tmp_path, "canvas.queue.json")
    run_id = out["run_id"]
    topics = [e["topic"] for e in events]
    assert topics.index("integration.batch") < max(i for i, t in enumerate(topics) if t == "task.completed")
    spawned = [e["payload"] for e in events if e["topic"] == "resolver.spawned"]
    assert spawned and spawned[0]["node_id"].startswith("docstrings@resolve")
    resolved = [e["payload"] for e in events if e["topic"] == "integration.proposal_verified"
                and e["payload"].get("resolves")]
    assert resolved and resolved[0]["resolves"]["origin_proposal_id"] == spawned[0]["origin"]
    final = [e["payload"] for e in events if e["topic"] == "integration.stack_plan"][-1]
    assert resolved[0]["proposal_id"] in [x["proposal_id"] for x in final["ordered_proposals"]]
    waves = [e["payload"] for e in events if e["topic"] == "wave.started"]
    assert waves[0]["base_source"] == "run_base" and "integration_head" in {w["base_source"] for w in waves}
    # both intents on slugify: the refactored body and its docstring; the buggy rewrite is not there
    core = git(repo, "show", f"{out['head']}:textkit/core.py")
    assert "def slugify(text: str) -> str:" in core and '"""Lowercase TEXT' in core
    assert "max(hi, min(lo, value))" not in git(repo, "show", f"{out['head']}:textkit/numbers.py")
    tree = tmp_path / "promoted"
    git(repo, "worktree", "add", "-q", "--detach", str(tree), out["head"])
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q"], cwd=tree, capture_output=True, text=True)
    assert tests.returncode == 0, tests.stdout[-1500:]
    html = tmp_path / "report.html"
    assert dome_cli("report", run_id, "--ops-root", str(ops), "--html", str(html)).returncode == 0
    text = " ".join(re.sub(r"<[^>]+>", " ", html.read_text()).split())
    assert "resolved onto the integration head by docstrings@resolve" in text
    assert "starts on the integration head" in text and "starts from the integration head" in text
    ver = dome_cli("verify", run_id, "--ops-root", str(ops), "--json")
    assert ver.returncode == 0 and json.loads(ver.stdout)["valid"] is True, ver.stdout[-2000:]
