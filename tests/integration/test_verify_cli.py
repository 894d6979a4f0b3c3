"""`dome verify` and `dome promote` through the CLI, on the real ledger
(SQLite under --ops-root), the real key files and a real repository."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from coordinator.integration.finish import FinishContext, finish_run
from coordinator.integration.policy import IntegrationPolicy
from coordinator.keys import load_or_create_signing_key
from ledger import Ledger
from tests.conftest import dome_cli, git
from tests.integration.conftest import edit_line, head, make_proposal

SUITE = {"suite": "command", "name": "tests", "argv": ["sh", "-c", "test -e f00.txt"]}


def _finish(repo: Path, ops: Path, props, policy: IntegrationPolicy, run_id: str = "run-cli"):
    key = load_or_create_signing_key(ops)
    ledger = Ledger.open(None, ops)
    try:
        for p, d in props:  # the run loop stores submitted diffs in the blob store
            p["diff_ref"] = ledger.blobs.put(d)
        ctx = FinishContext(run_id=run_id, repo=repo, base_ref=head(repo),
                            proposals=[p for p, _ in props], ledger=ledger, signing_key=key,
                            ops_root=ops, validations=[SUITE], policy=policy, seed=11)
        return finish_run(ctx)
    finally:
        ledger.close()


POLICY = IntegrationPolicy(suites_by_risk={"low": ("tests",), "high": ("tests",)},
                           human_gate_risk=("high",), promote_to="refs/heads/release")


@pytest.fixture
def promoted(big_repo: Path, tmp_path: Path):
    ops = tmp_path / "ops"
    props = [make_proposal(big_repo, f"p{k}", edit_line(f"f{k:02d}.txt", 9, f"v{k}")) for k in range(3)]
    res = _finish(big_repo, ops, props, POLICY)
    assert res.status == "promoted", res.missing
    return big_repo, ops, res


def _verify(ops: Path, run_id: str = "run-cli"):
    proc = dome_cli("verify", run_id, "--ops-root", str(ops), "--json")
    return proc.returncode, json.loads(proc.stdout)


def test_verify_cli_accepts_a_promoted_run(promoted) -> None:
    repo, ops, res = promoted
    rc, out = _verify(ops)
    assert rc == 0 and out["valid"], out["reasons"]
    assert out["head_ref"] == res.head_ref
    human = dome_cli("verify", "run-cli", "--ops-root", str(ops))
    assert human.returncode == 0 and "VALID" in human.stdout


def test_verify_cli_fails_when_a_ledger_record_is_changed(promoted) -> None:
    repo, ops, res = promoted
    db = sqlite3.connect(ops / "dome.db")
    for (name,) in db.execute("select name from sqlite_master where type='trigger'").fetchall():
        db.execute(f"drop trigger {name}")  # an attacker with write access to the database
    row = db.execute("select id, payload from events where topic='integration.apply_result' "
                     "order by id limit 1").fetchone()
    payload = json.loads(row[1])
    payload["head_ref"] = res.base_ref
    db.execute("update events set payload=? where id=?", (json.dumps(payload), row[0]))
    db.commit()
    db.close()
    rc, out = _verify(ops)
    assert rc == 1 and not out["valid"]
    kinds = {f["kind"] for f in out["failures"]}
    assert "ledger_hash_chain" in kinds and all(f["status"] != "ok" for f in out["failures"])


def test_verify_cli_fails_when_a_git_object_is_changed(promoted) -> None:
    repo, ops, res = promoted
    # replace the promoted commit by a different one with the same parent (history rewrite)
    git(repo, "update-ref", "refs/heads/release", res.base_ref)
    rc, out = _verify(ops)
    assert rc == 1 and [(f["kind"], f["subject"], f["status"]) for f in out["failures"]] == [
        ("target_ref", "refs/heads/release", "failed")]


def test_verify_cli_unknown_run_is_invalid(promoted) -> None:
    _, ops, _ = promoted
    rc, out = _verify(ops, "no-such-run")
    # an unknown run is bad input (exit 2, like every command), not a check that ran and failed
    assert rc == 2 and not out["valid"]
    assert out["error"]["code"] == "RUN_NOT_FOUND"


def test_promote_cli_consumes_consent_once(big_repo: Path, tmp_path: Path) -> None:
    ops = tmp_path / "ops"
    props = [make_proposal(big_repo, "risky", edit_line("f01.txt", 3, "x"), risk={"class": "high"})]
    res = _finish(big_repo, ops, props, POLICY, run_id="run-gate")
    assert res.status == "awaiting_consent" and res.consent_token
    bad = dome_cli("promote", "run-gate", "--consent", "nope", "--ops-root", str(ops), "--json")
    assert bad.returncode == 1 and json.loads(bad.stdout)["error"]["code"] == "CONSENT_INVALID"
    ok = dome_cli("promote", "run-gate", "--consent", res.consent_token, "--ops-root", str(ops), "--json")
    assert ok.returncode == 0, ok.stderr + ok.stdout
    assert json.loads(ok.stdout)["status"] == "promoted"
    again = dome_cli("promote", "run-gate", "--consent", res.consent_token, "--ops-root", str(ops), "--json")
    assert again.returncode == 1 and json.loads(again.stdout)["error"]["code"] == "CONSENT_ALREADY_USED"
    rc, out = _verify(ops, "run-gate")
    assert rc == 0, out["reasons"]


def test_large_artifacts_live_in_the_blob_store_and_still_verify(big_repo: Path, tmp_path: Path,
                                                                 monkeypatch) -> None:
    import coordinator.integration.recorder as fin
    from coordinator.integration.verify import verify_run
    from coordinator.keys import load_keyring
    monkeypatch.setattr(fin, "EXTERNALIZE_BYTES", 1500)
    ops = tmp_path / "ops"
    props = [make_proposal(big_repo, f"p{k}", edit_line(f"f{k:02d}.txt", 9, f"v{k}")) for k in range(3)]
    res = _finish(big_repo, ops, props, POLICY, run_id="run-big")
    assert res.status == "promoted", res.missing
    ledger = Ledger.open(None, ops)
    try:
        stubs = [e for e in ledger.events("run-big") if "artifact_ref" in e.payload]
        assert any(e.topic == "integration.stack_plan" for e in stubs)
        keyring = load_keyring(ops)
        assert verify_run(ledger, "run-big", keyring).valid
        plan_ref = next(e.payload["artifact_ref"] for e in stubs if e.topic == "integration.stack_plan")
        path = ledger.blobs.path(plan_ref)
        import os
        os.chmod(path, 0o644)
        path.write_bytes(path.read_bytes().replace(b'"p1"', b'"p9"'))
        assert not verify_run(ledger, "run-big", keyring).valid
    finally:
        ledger.close()


def test_verify_cli_without_a_ledger_is_bad_input_and_creates_nothing(tmp_path: Path) -> None:
    ops = tmp_path / "nowhere"
    proc = dome_cli("verify", "run-x", "--ops-root", str(ops), "--json")
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"]["code"] == "LEDGER_NOT_FOUND"
    assert not ops.exists()


def test_verify_cli_exit_codes_come_from_error_types(tmp_path: Path) -> None:
    """An unreadable ledger is exit 3 (LedgerUnavailable), a missing one exit 2 (LedgerNotFound)."""
    from coordinator.cli.verify_cmd import exit_code
    from ledger import LedgerNotFound, LedgerUnavailable
    from registry.errors import DomeError
    assert exit_code(LedgerNotFound("x")) == 2
    assert exit_code(LedgerUnavailable("x")) == 3
    assert exit_code(DomeError("x", code="LEDGER_NOT_FOUND")) == 1  # a code string alone decides nothing
    ops = tmp_path / "ops"
    ops.mkdir()
    (ops / "dome.db").write_bytes(b"not a database" * 300)
    proc = dome_cli("verify", "run-x", "--ops-root", str(ops), "--json")
    assert proc.returncode == 3
    assert json.loads(proc.stdout)["error"]["code"] == "LEDGER_UNAVAILABLE"
