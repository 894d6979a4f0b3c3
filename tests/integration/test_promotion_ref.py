"""`promoted` is recorded only after the target ref really moved.

The promotion decision authorizes moving the ref; the run says `promoted`
only once a compare-and-swap from the target the decision saw succeeded and
the ref points at the head. A coordinator killed between the decision and
the swap finishes the swap on resume; a target that moved meanwhile, or a
branch checked out in someone's worktree, ends the run with a typed reason,
and `dome verify` agrees that nothing was promoted.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.crashpoint import ENV, EXIT_STATUS
from tests.conftest import REPO_ROOT, dome_cli, git

pytestmark = pytest.mark.slow


def _queue(tmp_path: Path, repo: Path, promote_to: str) -> Path:
    queue = json.loads((REPO_ROOT / "examples" / "hello.queue.json").read_text())
    queue.update(repo=str(repo), promote_to=promote_to)
    qfile = tmp_path / "q.json"
    qfile.write_text(json.dumps(queue))
    return qfile


def _finished(ops: Path, run_id: str) -> dict:
    from ledger import Ledger
    with Ledger.open(None, ops) as ledger:
        ev = ledger.events(run_id)
    assert [e.topic for e in ev].count("run.finished") == 1 and ev[-1].topic == "run.finished"
    return dict(ev[-1].payload)


def test_a_branch_checked_out_in_the_repository_is_not_moved(git_repo: Path, tmp_path: Path) -> None:
    before = git(git_repo, "rev-parse", "refs/heads/main")
    ops = tmp_path / "ops"
    r = dome_cli("run", str(_queue(tmp_path, git_repo, "refs/heads/main")), "--ops-root", str(ops), "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 4 and out["status"] == "blocked", r.stdout + r.stderr[-2000:]
    assert git(git_repo, "rev-parse", "refs/heads/main") == before
    assert git(git_repo, "status", "--porcelain") == ""  # the user's worktree is untouched
    fin = _finished(ops, out["run_id"])
    assert any("checked out in the worktree" in m for m in fin["missing"]), fin
    # a valid record of a correctly blocked run: verify exits 0 and says blocked, with the reason
    v = dome_cli("verify", out["run_id"], "--ops-root", str(ops), "--json")
    ver = json.loads(v.stdout)
    assert v.returncode == 0 and ver["valid"] is True and ver["status"] == "blocked", v.stdout
    assert any("checked out in the worktree" in m for m in ver["blocked_by"]), ver
    assert {c["kind"]: c["status"] for c in ver["checks"]}["block_agrees_with_gate"] == "ok"
    text = dome_cli("verify", out["run_id"], "--ops-root", str(ops))
    assert text.stdout.splitlines()[0] == (f"run {out['run_id']}: the evidence chain is valid and "
                                           "the run is blocked (not promoted)")
    assert "promoted head" not in text.stdout


def test_a_kill_between_the_decision_and_the_swap_is_finished_by_resume(git_repo: Path, tmp_path: Path) -> None:
    ops, ref = tmp_path / "ops", "refs/heads/dome/hello"
    r = dome_cli("run", str(_queue(tmp_path, git_repo, ref)), "--ops-root", str(ops), "--json",
                 env={ENV: "promotion.computed"})
    assert r.returncode == EXIT_STATUS, r.stderr[-2000:]
    from ledger import Ledger
    with Ledger.open(None, ops) as ledger:
        (run_id,) = ledger.run_ids()
    r = dome_cli("run", "--resume", run_id, "--ops-root", str(ops), "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["status"] == "promoted", r.stderr[-2000:]
    assert git(git_repo, "rev-parse", ref) == out["head"]
    v = dome_cli("verify", run_id, "--ops-root", str(ops), "--json")
    assert v.returncode == 0 and json.loads(v.stdout)["valid"] is True, v.stdout


def test_a_target_moved_after_the_decision_ends_the_run_failed_not_promoted(git_repo: Path,
                                                                           tmp_path: Path) -> None:
    ops, ref = tmp_path / "ops", "refs/heads/dome/hello"
    r = dome_cli("run", str(_queue(tmp_path, git_repo, ref)), "--ops-root", str(ops), "--json",
                 env={ENV: "promotion.computed"})
    assert r.returncode == EXIT_STATUS, r.stderr[-2000:]
    # someone else moves the target while the coordinator is down
    (git_repo / "OTHER.txt").write_text("someone else\n")
    git(git_repo, "add", "OTHER.txt")
    git(git_repo, "commit", "-q", "-m", "someone else")
    theirs = git(git_repo, "rev-parse", "HEAD")
    git(git_repo, "update-ref", ref, theirs)
    from ledger import Ledger
    with Ledger.open(None, ops) as ledger:
        (run_id,) = ledger.run_ids()
    r = dome_cli("run", "--resume", run_id, "--ops-root", str(ops), "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 5 and out["status"] == "failed", r.stdout + r.stderr[-2000:]
    assert git(git_repo, "rev-parse", ref) == theirs  # their commit is not overwritten
    fin = _finished(ops, run_id)
    assert fin["status"] == "failed" and fin["error"]["code"] == "PROMOTION_TARGET_MOVED"
    assert fin["promoted_ref"] is None
    st = json.loads(dome_cli("status", run_id, "--ops-root", str(ops), "--json").stdout)
    assert st["status"] == "failed" and "PROMOTION_TARGET_MOVED" in st["reason"]
    # the record is intact and says what happened: a decision to promote that could not be carried out
    v = dome_cli("verify", run_id, "--ops-root", str(ops), "--json")
    ver = json.loads(v.stdout)
    assert v.returncode == 0 and ver["valid"] is True and ver["status"] == "failed", v.stdout
    text = dome_cli("verify", run_id, "--ops-root", str(ops)).stdout.splitlines()
    assert text[0] == f"run {run_id}: the evidence chain is valid and the run failed (not promoted)"
    assert any(line.startswith("  reason: PROMOTION_TARGET_MOVED") for line in text), text
    assert "promoted head" not in "\n".join(text)


def test_a_kill_between_a_consented_decision_and_the_swap_is_finished_by_promote_again(git_repo: Path,
                                                                                        tmp_path: Path) -> None:
    from tests.conftest import GATED_REF, gated_queue

    ops = tmp_path / "ops"
    out = json.loads(dome_cli("run", str(gated_queue(tmp_path, git_repo)), "--ops-root", str(ops), "--json").stdout)
    assert out["awaiting_consent"] is True, out
    token = Path(out["consent_token_file"]).read_text().strip()
    killed = dome_cli("promote", out["run_id"], "--consent", token, "--ops-root", str(ops), "--json",
                      env={ENV: "promotion.computed"})
    assert killed.returncode == EXIT_STATUS, killed.stderr[-2000:]
    again = dome_cli("promote", out["run_id"], "--consent", token, "--ops-root", str(ops), "--json")
    res = json.loads(again.stdout)
    assert again.returncode == 0 and res["status"] == "promoted", again.stdout + again.stderr[-2000:]
    assert git(git_repo, "rev-parse", GATED_REF) == res["head_ref"]
    v = dome_cli("verify", out["run_id"], "--ops-root", str(ops), "--json")
    assert v.returncode == 0 and json.loads(v.stdout)["valid"] is True, v.stdout[-2000:]
    third = dome_cli("promote", out["run_id"], "--consent", token, "--ops-root", str(ops), "--json")
    assert third.returncode == 1 and json.loads(third.stdout)["error"]["code"] == "CONSENT_ALREADY_USED"
