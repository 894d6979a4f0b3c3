"""The front door's ref policy through the real MCP SDK client: an agent's run promotes on its own
only onto a new ref under the operator's prefix; an existing ref, a ref outside the prefix or a
risk the operator's floor gates on is held at the human gate, whatever risk the queue declares."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from coordinator.mcp.refpolicy import RefPolicy, decide, effective_risk
from tests.attacks import attack
from tests.conftest import REPO_ROOT

from .conftest import connect, make_host, poll_done, work

pytestmark = pytest.mark.anyio


def _rev(repo: Path, ref: str) -> str | None:
    p = subprocess.run(["git", "rev-parse", "-q", "--verify", ref], cwd=repo, capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else None


def _queue(tmp_path: Path, repo: Path, promote_to: str, name: str) -> Path:
    """One low-risk task that writes a file (a patch), promoting to `promote_to`."""
    q = json.loads((REPO_ROOT / "examples" / "hello.queue.json").read_text())
    q.update(repo=str(repo), promote_to=promote_to, if_target_moved="stack")
    q["tasks"] = [dict(q["tasks"][0], risk="low")]
    path = work(tmp_path / "ops") / f"{name}.queue.json"  # a queue the agent may read (a root of the host)
    path.write_text(json.dumps(q))
    return path


def test_decide_is_pure_and_names_each_reason():
    pol = RefPolicy()
    assert decide(pol, "refs/heads/dome/agents/a", False, "low", ("high",)) == []
    assert "outside the agent prefix" in decide(pol, "refs/heads/release", False, "low", ("high",))[0]
    assert "exists" in decide(pol, "refs/heads/dome/agents/a", True, "low", ("high",))[0]
    assert effective_risk(["low", None], "high") == "high" and effective_risk(["critical"], "low") == "critical"
    assert "gated by the policy" in decide(RefPolicy(risk_floor="high"), "refs/heads/dome/agents/a", False,
                                           effective_risk(["low"], "high"), ("high",))[0]
    with pytest.raises(ValueError):
        RefPolicy.from_env(prefix="refs/heads/main")  # a prefix ends with "/"


@pytest.mark.slow
@attack("mcp-ref-existing")
@pytest.mark.parametrize("path", ["inproc", "stdio"])
async def test_low_risk_run_onto_an_existing_branch_waits_for_a_person(tmp_path, git_repo, path):
    """Reproduces the report: strict mode, a low-risk queue, promote_to an existing
    refs/heads/release with if_target_moved=stack. Before: the branch moved with no consent.
    Over stdio the door names its client by the process that started it."""
    subprocess.run(["git", "branch", "release"], cwd=git_repo, check=True, capture_output=True)
    before = _rev(git_repo, "refs/heads/release")
    outside = _queue(tmp_path, git_repo, "refs/heads/release", "release")
    async with connect(path, "legacy", tmp_path / "ops", consent_mode="strict") as client:
        sub = await client.call_tool("run_submit", {"work_queue": str(outside), "idempotency_key": "submit-release-1"})
        assert not sub.is_error, sub.content[0].text
        done = await poll_done(client, sub.structured_content["job_id"])
        assert done["status"] == "succeeded", done
        assert done["result"]["summary"]["awaiting_consent"] is True, done["result"]
        assert done["run"]["outcome"] == "awaiting_consent", done
        reasons = " ".join(done["run"]["reasons"])
        assert "refs/heads/release exists" in reasons and "outside the agent prefix" in reasons
        ev = (await client.call_tool("events", {"run_id": done["run_id"], "since": 0, "limit": 1})).structured_content
        started = ev["events"][0]["payload"]
        started = started.get("artifact", started)
        promote = await client.call_tool("promote", {"run_id": done["run_id"], "idempotency_key": "promote-release-1"})
        assert promote.is_error and promote.structured_content["code"] == "CONSENT_REQUIRED"
    assert _rev(git_repo, "refs/heads/release") == before  # no ref moved
    lines = [json.loads(x) for x in (tmp_path / "ops" / "mcp" / "telemetry.jsonl").read_text().splitlines()]
    who = {x["client"] for x in lines if x.get("event") == "call" and x["tool"] == "run_submit"}
    me = f"stdio:{Path(os.readlink(f'/proc/{os.getpid()}/exe')).name}[{os.getpid()}]"
    assert who == ({"operator"} if path == "inproc" else {me}), who
    assert started["submitted_by"] == next(iter(who))  # the ledger names the client that submitted the run


@pytest.mark.slow
@attack("mcp-ref-outside-prefix")
async def test_new_ref_outside_the_prefix_and_a_gated_floor_wait_for_a_person(tmp_path, git_repo):
    """A new ref outside the prefix, and a low-risk queue under a floor the policy gates on: both held;
    a new ref under the prefix promotes on its own."""
    host = make_host(tmp_path / "ops", "strict")
    host.ref_policy = RefPolicy(risk_floor="high")
    floor = _queue(tmp_path, git_repo, "refs/heads/dome/agents/floor", "floor")
    outside = _queue(tmp_path, git_repo, "refs/heads/feature", "outside")
    async with connect("inproc", "legacy", tmp_path / "ops", host=host) as client:
        jobs = {}
        for name, q in (("floor", floor), ("outside", outside)):
            sub = await client.call_tool("run_submit", {"work_queue": str(q), "idempotency_key": f"submit-{name}-1"})
            assert not sub.is_error, sub.content[0].text
            jobs[name] = sub.structured_content["job_id"]
        for name, job_id in jobs.items():
            done = await poll_done(client, job_id)
            assert done["run"]["outcome"] == "awaiting_consent", (name, done)
            want = "gated by the policy" if name == "floor" else "outside the agent prefix"
            assert any(want in r for r in done["run"]["reasons"]), (name, done["run"])
    assert _rev(git_repo, "refs/heads/dome/agents/floor") is None and _rev(git_repo, "refs/heads/feature") is None
