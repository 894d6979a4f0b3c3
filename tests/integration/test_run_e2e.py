"""`dome run` ends promoted through the integration stage; `dome verify`
re-checks it offline."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import GATED_REF, REPO_ROOT, dome_cli, gated_queue, git


@pytest.mark.slow
def test_dome_run_promotes_and_verify_accepts(git_repo: Path, tmp_path: Path) -> None:
    queue = json.loads((REPO_ROOT / "examples" / "hello.queue.json").read_text())
    queue["repo"] = str(git_repo)
    qfile = tmp_path / "q.json"
    qfile.write_text(json.dumps(queue))
    ops = tmp_path / "ops"
    run = dome_cli("run", str(qfile), "--ops-root", str(ops), "--json")
    out = json.loads(run.stdout)
    assert run.returncode == 0 and out["status"] == "promoted", run.stderr[-2000:]
    assert git(git_repo, "rev-parse", queue["promote_to"]) == out["head"]
    assert git(git_repo, "show", f"{out['head']}:HELLO.txt") == "hello"
    # `count` depends on `greet`: it ran on a derived base and is stacked after it
    assert git(git_repo, "show", f"{out['head']}:COUNT.txt").strip().isdigit()
    ver = dome_cli("verify", out["run_id"], "--ops-root", str(ops), "--json")
    assert ver.returncode == 0, ver.stdout
    assert json.loads(ver.stdout)["valid"] is True
    run_dir = ops / "runs" / out["run_id"]
    for rel in ("gate/gate.decision.json", "promotion/promotion.decision.json",
                "promotion/evidence.intoto.jsonl"):
        assert (run_dir / rel).is_file(), rel
    # every attempt ran on a sender-constrained grant (cnf, a fresh key each) and every call carried its proof
    from ledger import Ledger
    ledger = Ledger.open(None, ops)
    try:
        ev = ledger.events(out["run_id"])
    finally:
        ledger.close()
    issued = [e.payload["profile"] for e in ev if e.topic == "grant.issued"]
    assert issued and all("cnf" in p for p in issued)
    assert len({p["cnf"]["kid"] for p in issued}) == len(issued)
    # (an endgame duplicate may still meet GRANT_REVOKED; no call of a genuine worker fails its proof)
    assert not [e.payload for e in ev if e.topic == "grant.rejected" and e.payload["code"].startswith("GRANT_PROOF")]
    assert [e for e in ev if e.topic == "grant.call"]


def _ref(repo: Path, ref: str) -> str | None:
    try:
        return git(repo, "rev-parse", "-q", "--verify", ref)
    except Exception:  # noqa: BLE001 - git exits 1 for a missing ref
        return None


def test_dome_run_held_at_the_human_gate_then_dome_promote(git_repo: Path, tmp_path: Path) -> None:
    """`dome run` of a task the default policy gates ends blocked awaiting consent (token file
    written, 0600); `dome promote RUN --consent TOKEN` moves the ref once, verify passes."""
    ops = tmp_path / "ops"
    run = dome_cli("run", str(gated_queue(tmp_path, git_repo)), "--ops-root", str(ops), "--json")
    out = json.loads(run.stdout)
    assert run.returncode == 4 and out["status"] == "blocked", run.stderr[-2000:]
    token_file = ops / "runs" / out["run_id"] / "gate" / "consent.token"
    assert out["awaiting_consent"] is True and out["consent_token_file"] == str(token_file)
    assert token_file.stat().st_mode & 0o777 == 0o600
    st = json.loads(dome_cli("status", out["run_id"], "--ops-root", str(ops), "--json").stdout)
    assert st["awaiting_consent"] is True and st["missing"] == ["consent: missing (human approval required by policy)"]
    assert _ref(git_repo, GATED_REF) is None
    # held at the gate: the record is valid and says what it waits for
    held = dome_cli("verify", out["run_id"], "--ops-root", str(ops))
    assert held.returncode == 0, held.stdout + held.stderr
    assert held.stdout.splitlines()[0] == (f"run {out['run_id']}: the evidence chain is valid and the run "
                                           "awaits consent (not promoted)")
    assert f"  next: dome promote {out['run_id']} --consent TOKEN" in held.stdout
    held_js = json.loads(dome_cli("verify", out["run_id"], "--ops-root", str(ops), "--json").stdout)
    assert held_js["status"] == "awaiting_consent" and held_js["blocked_by"] == st["missing"]
    token = token_file.read_text().strip()
    bad = dome_cli("promote", out["run_id"], "--consent", "nope", "--ops-root", str(ops), "--json")
    assert bad.returncode == 1 and json.loads(bad.stdout)["error"]["code"] == "CONSENT_INVALID"
    ok = dome_cli("promote", out["run_id"], "--consent", token, "--approved-by", "lead", "--ops-root", str(ops),
                  "--json")
    assert ok.returncode == 0, ok.stderr + ok.stdout
    promoted = json.loads(ok.stdout)
    assert promoted["status"] == "promoted" and _ref(git_repo, GATED_REF) == promoted["head_ref"]
    assert git(git_repo, "show", f"{promoted['head_ref']}:GATED.txt") == "gated"
    ver = dome_cli("verify", out["run_id"], "--ops-root", str(ops), "--json")
    assert ver.returncode == 0 and json.loads(ver.stdout)["valid"] is True, ver.stdout
    assert json.loads(ver.stdout)["status"] == "promoted"
    again = dome_cli("promote", out["run_id"], "--consent", token, "--ops-root", str(ops), "--json")
    assert again.returncode == 1 and json.loads(again.stdout)["error"]["code"] == "CONSENT_ALREADY_USED"
    assert _ref(git_repo, GATED_REF) == promoted["head_ref"]


def test_a_policy_drc_suite_the_queue_does_not_define_is_refused_at_load(git_repo: Path,
                                                                          tmp_path: Path) -> None:
    """The default policy's high class needs drc. A queue that defines none could never pass
    the gate (a deckless drc suite once got the innocent proposal ejected by the bisect); it is
    refused before any worker starts, naming the suite, and nothing is written."""
    ops = tmp_path / "ops"
    run = dome_cli("run", str(gated_queue(tmp_path, git_repo, drc=False)), "--ops-root", str(ops), "--json")
    err = json.loads(run.stdout)["error"]
    assert run.returncode == 2 and err["code"] == "SUITE_NOT_DEFINED", run.stdout
    assert err["details"]["missing"] == ["drc"] and not ops.exists()


def test_a_policy_drc_suite_the_queue_does_not_define_is_missing_not_an_ejection(git_repo: Path,
                                                                                  tmp_path: Path) -> None:
    """Behind the pre-flight (which refuses such a queue at load), the gate holds on its own:
    a policy suite with no definition is named missing, not synthesized; a deckless drc suite
    once errored on every head, so the bisect ejected the innocent proposal and the run ended
    blocked with "the plan includes no proposal" and no consent token."""
    from coordinator.keys import load_keyring, load_or_create_signing_key
    from coordinator.preflight import prepare
    from coordinator.runloop.finish import integration_finish
    from coordinator.runloop.loop import RunContext, RunLoop
    from ledger import Ledger

    ops = tmp_path / "ops"
    q = gated_queue(tmp_path, git_repo, drc=False)
    ledger = Ledger.open(None, ops)
    try:
        ctx = RunContext(ledger=ledger, ops_root=ops, signer=load_or_create_signing_key(ops),
                         keyring=load_keyring(ops), finish=integration_finish)
        out = RunLoop.start(q, ctx, prepared=prepare(q, integrate=False)).run().to_json()
    finally:
        ledger.close()
    assert out["status"] == "blocked" and out["awaiting_consent"] is False
    run_dir = ops / "runs" / out["run_id"]
    gate = json.loads((run_dir / "gate" / "gate.decision.json").read_text())
    assert "validation:drc: missing (no report bound to the head)" in gate["missing"], gate["missing"]
    assert len(gate["included_proposals"]) == 1, gate  # not ejected
    assert not (run_dir / "gate" / "consent.token").exists()
    topics = [json.loads(p.read_text()).get("topic") for p in (run_dir / "events").glob("event.*.json")]
    assert "integration.ejected" not in topics and "integration.bisect" not in topics
