"""Dependent tasks start from a derived base (run base + their ancestors'
winning proposals, built by the run loop in its own clone). Integration
rebuilds that base itself, checks its tree, and stacks the dependent
proposal after its ancestors, or not at all."""
from __future__ import annotations

from pathlib import Path

from coordinator.integration.finish import FinishContext, finish_run
from coordinator.integration.policy import IntegrationPolicy
from coordinator.integration.verify import verify_run
from coordinator.runloop.derived_base import build_derived_base
from registry.diffs import describe_diff
from registry.signing import Keyring, SigningKey
from tests.conftest import git
from tests.integration.conftest import edit_line, git_bytes, head, make_proposal, worktree_diff
from ledger import Ledger

SUITE = {"suite": "command", "name": "tests", "argv": ["true"]}
POLICY = IntegrationPolicy(suites_by_risk={"low": ("tests",)}, promote_to="refs/heads/out")


def _setup(repo: Path, tmp: Path, ancestor_change, tamper_tree: bool = False):
    base = head(repo)
    anc, anc_diff = make_proposal(repo, "anc", ancestor_change, node_id="a")
    scratch = tmp / "scratch"
    git(tmp, "clone", "-q", str(repo), str(scratch))
    d = build_derived_base(scratch / ".git", base, [anc], lambda p: anc_diff, ref_name="refs/dome/bases/x")
    git(scratch, "checkout", "-q", "--detach", d.base_ref)
    edit_line("f05.txt", 20, "dependent edit")(scratch)
    p = scratch / "f03.txt"  # touches the file the ancestor changed, below its edit
    lines = p.read_text().splitlines(keepends=True)
    lines[40] = "dependent edit in f03\n"
    p.write_text("".join(lines))
    raw = worktree_diff(scratch)
    desc = describe_diff(raw, d.base_ref)
    dep = {"proposal_id": "dep", "node_id": "b", "base_ref": d.base_ref, "base_tree_hash": d.base_tree_hash,
           "diff_canonicalization": desc["diff_canonicalization"], "diff_digest": desc["diff_digest"],
           "touched_files": desc["touched_files"], "risk": "low", "declared_constraints": {},
           "created_at": "2026-01-01T00:00:00Z"}
    ledger = Ledger.open(None, tmp / "ops")
    ev = d.to_event("b")
    if tamper_tree:
        ev["base_tree_hash"] = "0" * 40
    ledger.append("run-d", "task.base_derived", ev)
    diffs_by_id = {"anc": anc_diff, "dep": desc["canonical"]}
    return base, [anc, dep], diffs_by_id, ledger


def _finish(repo, tmp, props, diffs_by_id, ledger):
    key = SigningKey(b"\x05" * 32)
    ctx = FinishContext(run_id="run-d", repo=repo, base_ref=head(repo), proposals=props, ledger=ledger,
                        signing_key=key, ops_root=tmp / "ops", validations=[SUITE], policy=POLICY,
                        diff_loader=lambda p: diffs_by_id[p["proposal_id"]])
    return finish_run(ctx), key


def test_dependent_proposal_stacks_after_its_ancestor(big_repo: Path, tmp_path: Path) -> None:
    base, props, diffs_by_id, ledger = _setup(big_repo, tmp_path, edit_line("f03.txt", 10, "ancestor"))
    res, key = _finish(big_repo, tmp_path, list(reversed(props)), diffs_by_id, ledger)
    assert res.status == "promoted", res.missing
    assert res.included == ["anc", "dep"]
    text = git(big_repo, "show", f"{res.head_ref}:f03.txt")
    assert "ancestor" in text and "dependent edit in f03" in text
    assert verify_run(ledger, "run-d", Keyring({key.kid: key.public})).valid


def test_dependent_is_not_stacked_without_its_ancestor(big_repo: Path, tmp_path: Path) -> None:
    base, props, diffs_by_id, ledger = _setup(big_repo, tmp_path, edit_line("f03.txt", 10, "ancestor"))
    anc = dict(props[0])
    anc["risk"] = "low"
    anc["declared_constraints"] = {"no_deps": True}
    diffs_by_id["anc"] = diffs_by_id["anc"].replace(b"+ancestor", b"+tampered")  # digest now wrong
    res, _ = _finish(big_repo, tmp_path, [anc, props[1]], diffs_by_id, ledger)
    codes = {(r["proposal_id"], r["code"]) for r in res.rejected}
    assert ("anc", "PROPOSAL_DIGEST_MISMATCH") in codes
    assert ("dep", "PROPOSAL_DERIVED_BASE_MISMATCH") in codes
    assert "dep" not in res.included


def test_derived_base_with_a_wrong_tree_is_rejected(big_repo: Path, tmp_path: Path) -> None:
    base, props, diffs_by_id, ledger = _setup(big_repo, tmp_path, edit_line("f03.txt", 10, "ancestor"),
                                              tamper_tree=True)
    res, _ = _finish(big_repo, tmp_path, props, diffs_by_id, ledger)
    assert {"proposal_id": "dep"}.items() <= next(r for r in res.rejected if r["proposal_id"] == "dep").items()
    assert any(r["code"] == "PROPOSAL_DERIVED_BASE_MISMATCH" for r in res.rejected)
    assert res.included == ["anc"]
