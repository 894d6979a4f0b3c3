"""promote's success path through the real MCP SDK client: a high-risk run held at the human
gate (default policy) -> promote with the run's own single-use consent token -> ref moved,
verify passes, a second promote with the same token refused."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.attacks import attack
from tests.conftest import GATED_REF, REPO_ROOT, dome_cli, gated_queue

from .conftest import connect, http_host, poll_done, work

pytestmark = pytest.mark.anyio

TO_REF = GATED_REF


def _rev(repo: Path, ref: str) -> str | None:
    p = subprocess.run(["git", "rev-parse", "-q", "--verify", ref], cwd=repo, capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else None


async def _held_run(client, queue: Path, key: str) -> tuple[str, dict]:
    """Submit the gated queue and wait: (run_id, the finished job), held at the human gate."""
    sub = await client.call_tool("run_submit", {"work_queue": str(queue), "idempotency_key": key})
    assert not sub.is_error, sub.content[0].text
    done = await poll_done(client, sub.structured_content["job_id"])
    assert done["status"] == "succeeded" and done["result"]["summary"]["awaiting_consent"] is True, done
    return sub.structured_content["run_id"], done


async def test_promote_success_with_the_runs_consent_token(tmp_path, git_repo):
    ops = tmp_path / "ops"
    queue = gated_queue(work(ops), git_repo)  # a queue the agent may read (a root of the host)
    assert _rev(git_repo, TO_REF) is None
    async with connect("inproc", "legacy", ops, consent_mode="strict") as client:
        run_id, done = await _held_run(client, queue, "submit-gated-1")
        result = done["result"]
        assert result["outcome"] == "blocked", result
        token_file = ops / "runs" / run_id / "gate" / "consent.token"
        assert result["summary"]["awaiting_consent"] is True, result["summary"]
        assert result["summary"]["consent_token_file"] == str(token_file) and token_file.is_file()
        st = (await client.call_tool("run_status", {"run_id": run_id})).structured_content
        assert st["awaiting_consent"] is True and st["missing"] == [
            "consent: missing (human approval required by policy)"], st
        token = token_file.read_text().strip()
        assert _rev(git_repo, TO_REF) is None  # held: nothing promoted yet

        ok = await client.call_tool("promote", {"run_id": run_id, "idempotency_key": "promote-gated-1", "consent_token": token})
        assert not ok.is_error, ok.content[0].text
        out = ok.structured_content
        assert out["status"] == "promoted" and out["consent_mode"] == "strict", out
        assert _rev(git_repo, TO_REF) == out["head_ref"]

        ver = await client.call_tool("verify", {"run_id": run_id})
        assert not ver.is_error and ver.structured_content["valid"] is True, ver.structured_content

        again = await client.call_tool("promote", {"run_id": run_id, "idempotency_key": "promote-gated-2",
                                                   "consent_token": token})
        assert again.is_error and again.structured_content["code"] == "CONSENT_ALREADY_USED", again.content[0].text
        assert _rev(git_repo, TO_REF) == out["head_ref"]
        # without a token: it says the run is already promoted instead of asking for consent
        told = await client.call_tool("promote", {"run_id": run_id, "idempotency_key": "promote-gated-3"})
        assert not told.is_error, told.content[0].text
        assert told.structured_content["already_promoted"] is True and told.structured_content["status"] == "promoted"
        # poll tells the run's real outcome now, not the job's view from when `dome run` exited
        polled = (await client.call_tool("poll", {"job_id": done["job_id"]})).structured_content
        assert polled["run"]["outcome"] == "promoted", polled


async def test_promote_success_lenient_host_reads_the_gate_token(tmp_path, git_repo):
    """CONSENT_MODE lenient: the caller echoes the host's single-use confirmation; the host
    reads the run's gate token itself and promotes; the spent confirmation is refused after."""
    ops = tmp_path / "ops"
    queue = gated_queue(work(ops), git_repo)  # a queue the agent may read (a root of the host)
    async with connect("inproc", "legacy", ops, consent_mode="lenient") as client:
        run_id, _ = await _held_run(client, queue, "submit-gated-2")
        ask = await client.call_tool("promote", {"run_id": run_id, "idempotency_key": "promote-gated-3"})
        assert ask.is_error and ask.structured_content["code"] == "CONSENT_REQUIRED"
        confirm = ask.structured_content["details"]["consent_token"]
        assert confirm.startswith("dct1.") and _rev(git_repo, TO_REF) is None
        ok = await client.call_tool("promote", {"run_id": run_id, "idempotency_key": "promote-gated-3",
                                                "consent_token": confirm})
        assert not ok.is_error, ok.content[0].text
        assert ok.structured_content["status"] == "promoted" and ok.structured_content["consent_mode"] == "lenient"
        assert _rev(git_repo, TO_REF) == ok.structured_content["head_ref"]
        reuse = await client.call_tool("promote", {"run_id": run_id, "idempotency_key": "promote-gated-4",
                                                   "consent_token": confirm})
        assert reuse.is_error and reuse.structured_content["code"] == "CONSENT_INVALID"


async def test_promote_passes_a_token_that_starts_with_a_dash_as_a_value(tmp_path, git_repo):
    """A consent token is data. One that begins with "-" reaches `dome promote` as the value of
    --consent (a wrong one is refused with a typed error), never as an unknown option that
    makes the command exit 2 with no JSON; the real token still promotes after it."""
    ops = tmp_path / "ops"
    queue = gated_queue(work(ops), git_repo)  # a queue the agent may read (a root of the host)
    async with connect("inproc", "legacy", ops, consent_mode="strict") as client:
        run_id, _ = await _held_run(client, queue, "submit-dash")
        token_file = ops / "runs" / run_id / "gate" / "consent.token"
        assert token_file.is_file()
        token = token_file.read_text().strip()
        assert not token.startswith("-")  # tokens a person pastes after --consent
        wrong = await client.call_tool("promote", {"run_id": run_id, "idempotency_key": "promote-dash-1",
                                                   "consent_token": "-" + token[1:]})
        assert wrong.is_error, wrong.content[0].text
        assert wrong.structured_content["code"].startswith("CONSENT_"), wrong.structured_content
        assert _rev(git_repo, TO_REF) is None
        ok = await client.call_tool("promote", {"run_id": run_id, "idempotency_key": "promote-dash-2",
                                                "consent_token": token})
        assert not ok.is_error, ok.content[0].text
        assert _rev(git_repo, TO_REF) == ok.structured_content["head_ref"]


@attack("mcp-run-attribution")
async def test_every_record_of_a_run_a_client_submitted_names_the_client(tmp_path, git_repo):
    """A named client over HTTP submits a gated run and promotes it with the person's token: every
    record of the run, those `dome promote` writes after run.finished too, names the client in its
    signed envelope, and both verifiers pass."""
    ops = tmp_path / "ops"
    queue = gated_queue(work(ops), git_repo)
    made = dome_cli("mcp", "token", "create", "--name", "ci-agent", "--allow", "promote", "--ops-root", str(ops),
                    "--json", timeout=120, cwd=REPO_ROOT)
    token = json.loads(made.stdout)["token"]
    with http_host(ops, "operator-token-for-attribution-0123") as url:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:
            async with Client(streamable_http_client(url, http_client=http), mode="legacy", cache=None) as client:
                run_id, _ = await _held_run(client, queue, "submit-attributed-1")
                consent = (ops / "runs" / run_id / "gate" / "consent.token").read_text().strip()  # the person's
                ok = await client.call_tool("promote", {"run_id": run_id, "idempotency_key": "promote-attributed-1",
                                                        "consent_token": consent})
                assert not ok.is_error and ok.structured_content["status"] == "promoted", ok.content[0].text
                events, since, more = [], 0, True
                while more:  # every record, a page at a time
                    page = (await client.call_tool("events", {"run_id": run_id, "since": since, "limit": 500})
                            ).structured_content
                    events, since, more = events + page["events"], page["next_since"], page["more"]
    assert {"run.started", "run.finished", "promotion.computed"} <= {e["topic"] for e in events}
    assert {e.get("submitted_by") for e in events} == {"ci-agent"}, {e["topic"] for e in events if
                                                                       e.get("submitted_by") != "ci-agent"}
    led = dome_cli("ledger", "verify", "--ops-root", str(ops), "--json", timeout=300)
    assert led.returncode == 0 and json.loads(led.stdout)["ok"] is True, led.stdout
    ver = dome_cli("verify", run_id, "--ops-root", str(ops), "--json", timeout=300)
    assert ver.returncode == 0 and json.loads(ver.stdout)["valid"] is True, ver.stdout[-2000:]
