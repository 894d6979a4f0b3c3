"""run_submit -> poll -> run_status / events / verify -> promote behind consent, through the MCP host."""
from __future__ import annotations

import json

import pytest

from tests.conftest import REPO_ROOT

from .conftest import connect, poll_done, work

pytestmark = pytest.mark.anyio


def _queue(tmp_path, repo):
    q = json.loads((REPO_ROOT / "examples" / "hello.queue.json").read_text())
    q["repo"] = str(repo)
    q["promote_to"] = "refs/heads/dome/agents/hello"  # a new ref under the agent prefix: no person needed
    path = work(tmp_path / "ops") / "work.queue.json"  # a queue the agent may read (a root of the host)
    path.write_text(json.dumps(q))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("consent_mode", ["strict", "lenient"])
async def test_run_submit_poll_promote(tmp_path, git_repo, consent_mode):
    queue = _queue(tmp_path, git_repo)
    async with connect("inproc", "legacy", tmp_path / "ops", consent_mode=consent_mode) as client:
        sub = await client.call_tool("run_submit", {"work_queue": str(queue), "idempotency_key": "submit-hello-1"})
        assert not sub.is_error, sub.content[0].text
        run_id, job_id = sub.structured_content["run_id"], sub.structured_content["job_id"]
        assert run_id and job_id.startswith("job_")
        again = await client.call_tool("run_submit", {"work_queue": str(queue), "idempotency_key": "submit-hello-1"})
        assert again.structured_content["job_id"] == job_id and again.structured_content["deduplicated"] is True
        done = await poll_done(client, job_id)
        assert done["status"] == "succeeded", done
        assert done["result"]["run_id"] == run_id
        status = await client.call_tool("run_status", {"run_id": run_id})
        assert not status.is_error and status.structured_content["run_id"] == run_id
        events = await client.call_tool("events", {"run_id": run_id, "since": 0, "limit": 5})
        ev = events.structured_content
        assert not events.is_error and ev["count"] == 5 and ev["more"] is True
        assert [e["sequence"] for e in ev["events"]] == [1, 2, 3, 4, 5] and ev["next_since"] == 5
        nxt = (await client.call_tool("events", {"run_id": run_id, "since": 5, "limit": 2})).structured_content
        assert [e["sequence"] for e in nxt["events"]] == [6, 7]
        # this run promoted itself (no human gate): promote says so instead of asking for consent
        res = await client.call_tool("promote", {"run_id": run_id, "idempotency_key": "promote-0"})
        assert not res.is_error and res.structured_content["already_promoted"] is True, res.content[0].text
        assert (await client.call_tool("poll", {"job_id": job_id})).structured_content["run"]["outcome"] == "promoted"
        if consent_mode == "lenient":
            from coordinator.mcp.consent import ConsentBook

            token = ConsentBook(tmp_path / "ops" / "mcp", "lenient").mint("promote", run_id)
            assert token.startswith("dct1.")
            res = await client.call_tool("promote", {"run_id": run_id, "idempotency_key": "promote-1",
                                                     "consent_token": token})
            # the confirmation was spent; this run is not held at a human gate
            assert res.is_error and res.structured_content["code"] == "CONSENT_NOT_REQUESTED"
            reuse = await client.call_tool("promote", {"run_id": run_id, "idempotency_key": "promote-2",
                                                       "consent_token": token})
            assert reuse.is_error and reuse.structured_content["code"] == "CONSENT_INVALID"
        else:
            res = await client.call_tool("promote", {"run_id": run_id, "idempotency_key": "promote-1",
                                                     "consent_token": "not-the-runs-token"})
            assert res.is_error and res.structured_content["code"].startswith("CONSENT_")
