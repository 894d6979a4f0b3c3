"""`dome run` ends promoted through the integration stage; `dome verify`
re-checks it offline."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, dome_cli, git


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
