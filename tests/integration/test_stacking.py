"""Stacking on a real repository: clean stacks, conflict policy, bisection."""
from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.integration.canvas import Canvas
from coordinator.integration.gitio import ObjectReader, parse_trailers
from coordinator.integration.planning import Candidate, plan_stack
from coordinator.integration.policy import IntegrationPolicy
from coordinator.integration.proposals import BaseInspector, verify_proposal
from coordinator.integration.stacking import Stacker
from coordinator.integration.validation import SuiteRunner
from tests.conftest import git
from tests.integration.conftest import edit_line, head, make_proposal


def _stack(repo: Path, proposals: list[tuple[dict, bytes]], policy: IntegrationPolicy | None = None,
           resolver_hook=None):
    policy = policy or IntegrationPolicy()
    base = head(repo)
    events: list[tuple[str, dict]] = []
    checked = {}
    with ObjectReader(repo) as reader:
        insp = BaseInspector(repo, reader)
        for prop, diff in proposals:
            rej, cp = verify_proposal(prop, diff, wave_base=base, policy=policy, inspector=insp)
            assert rej == [], rej
            checked[cp.proposal_id] = cp
    cands = [Candidate.from_proposal(c.proposal, c.fingerprints, c.parsed.touched_files(), policy)
             for c in checked.values()]
    plan, index = plan_stack(cands, base_ref=base, seed=7, policy=policy, run_id="r1")
    canvas = Canvas(repo, base, run_id="r1")
    stacker = Stacker(canvas, checked, plan, index, policy,
                      emit=lambda t, a: events.append((t, a)), resolver_hook=resolver_hook)
    stacker.run()
    return canvas, stacker, events, plan


def test_non_overlapping_proposals_stack_cleanly(big_repo: Path) -> None:
    props = [make_proposal(big_repo, f"p{k}", edit_line(f"f{k:02d}.txt", 10 + k, f"edit {k}"))
             for k in range(6)]
    canvas, stacker, events, plan = _stack(big_repo, props)
    try:
        assert list(plan.ordered) == [f"p{k}" for k in range(6)]
        results = stacker.state.apply_results
        assert all(r["applied"] for r in results.values()) and len(results) == 6
        assert len(canvas.checkpoints) == 6  # one checkpoint per layer
        # each checkpoint is a real commit whose parent is the previous one, with trailers
        parent = head(big_repo)
        for k, cp in enumerate(canvas.checkpoints):
            assert git(big_repo, "rev-parse", cp.commit + "^") == parent
            msg = git(big_repo, "log", "-1", "--format=%B", cp.commit)
            trailers = parse_trailers(msg)
            assert trailers["Dome-Proposal"] == f"p{k}"
            assert trailers["Dome-Diff-Digest"] == f"p{k} {results[f'p{k}']['diff_digest']}"
            parent = cp.commit
        # the stacked tree equals plain git applying every diff in order
        git(big_repo, "checkout", "-q", "--detach", head(big_repo))
        import subprocess
        for _, diff in props:
            subprocess.run(["git", "apply", "--index"], input=diff, cwd=big_repo, check=True)
        assert git(big_repo, "write-tree") == canvas.checkpoints[-1].tree
        # rollback to any checkpoint
        canvas.rollback(canvas.checkpoints[2].checkpoint_id)
        assert canvas.head == canvas.checkpoints[2].commit and canvas.included == ["p0", "p1", "p2"]
        assert canvas.head_tree == canvas.checkpoints[2].tree
    finally:
        canvas.close()


def _overlap_set(repo: Path):
    d = make_proposal(repo, "d", edit_line("f07.txt", 30, "independent"))
    a = make_proposal(repo, "a", edit_line("f03.txt", 10, "A's version"))
    def b_change(r: Path) -> None:
        edit_line("f03.txt", 10, "B's version")(r)
        edit_line("f03.txt", 40, "B's far edit")(r)
    b = make_proposal(repo, "b", b_change, atomicity="hunk_ok")
    c = make_proposal(repo, "c", edit_line("f03.txt", 11, "C's version"))
    return [d, a, b, c]


def test_overlapping_hunks_reorder_split_and_drop(big_repo: Path) -> None:
    canvas, stacker, events, plan = _stack(big_repo, _overlap_set(big_repo))
    try:
        assert plan.ordered[0] == "d"  # non-overlapping first
        decisions = [(a["proposal_id"], a["action"]) for t, a in events
                     if t == "integration.conflict_decision"]
        assert decisions == [("b", "reorder"), ("c", "reorder"), ("b", "split"),
                             ("b:split-b", "drop"), ("c", "drop")]
        for t, a in events:
            if t == "integration.conflict_decision":
                assert a["tie_break_order"] == ["policy_precedence", "proposal_id",
                                                "conflict_fingerprint"]
        split = next(a for t, a in events if t == "integration.split_result")
        assert split["proposal_id_A"] == "b:split-a" and split["provenance"]["parent_proposal_id"] == "b"
        assert split["keep_A"] == [["f03.txt", 1]] and split["validation_escalated"]
        assert canvas.included == ["d", "a", "b:split-a"]
        why = stacker.state.why_blocked
        assert why["c"]["state"] == "dropped" and why["b"]["state"] == "split"
        text = git(big_repo, "show", f"{canvas.head}:f03.txt")
        assert "A's version" in text and "B's far edit" in text and "C's" not in text
        applied = stacker.state.apply_results
        assert applied["c"]["applied"] is False and applied["c"]["conflict_summary"]["files"] == ["f03.txt"]
    finally:
        canvas.close()


def test_conflict_goes_to_a_resolver_worker_on_the_current_head(big_repo: Path) -> None:
    spawned: list[dict] = []
    canvas, stacker, events, plan = _stack(big_repo, _overlap_set(big_repo),
                                           resolver_hook=spawned.append)
    try:
        assert [r["proposal_id"] for r in spawned] == ["b:split-b", "c"]
        assert all(r["head_ref"] for r in spawned)
        assert stacker.state.why_blocked["c"]["state"] == "awaiting_resolver"
    finally:
        canvas.close()


def test_atomic_file_split_and_policy_without_split(big_repo: Path) -> None:
    a = make_proposal(big_repo, "a", edit_line("f03.txt", 10, "A"))
    def two_files(r: Path) -> None:
        edit_line("f03.txt", 10, "B")(r)
        edit_line("f09.txt", 10, "B elsewhere")(r)
    b = make_proposal(big_repo, "b", two_files, atomicity="atomic_file")
    canvas, stacker, events, _ = _stack(big_repo, [a, b])
    try:
        assert canvas.included == ["a", "b:split-a"]
        split = next(x for t, x in events if t == "integration.split_result")
        assert split["partitioning"] == "by_file" and split["keep_A"] == [["f09.txt", None]]
    finally:
        canvas.close()
    canvas, stacker, events, _ = _stack(big_repo, [a, b], IntegrationPolicy().with_(
        conflict_actions=("reorder", "drop")))
    try:
        assert canvas.included == ["a"]
    finally:
        canvas.close()


def test_failing_validation_bisects_to_the_culprit(big_repo: Path) -> None:
    props = [make_proposal(big_repo, f"p{k}", edit_line(f"f{k:02d}.txt", 3, f"edit {k}"))
             for k in range(7)]
    props[4] = make_proposal(big_repo, "p4", lambda r: (r / "BROKEN").write_text("x\n"))
    canvas, stacker, events, _ = _stack(big_repo, props)
    try:
        suite = {"suite": "command", "name": "no-broken", "argv": ["sh", "-c", "test ! -e BROKEN"]}
        reports = stacker.validate([suite], SuiteRunner(big_repo))
        assert [r["result"] for r in reports] == ["passed"]
        bis = next(a for t, a in events if t == "integration.bisect")
        assert bis["culprit_proposal_ids"] == ["p4"]
        assert len(bis["steps"]) <= 3  # log2(7) validations, not 7
        ej = next(a for t, a in events if t == "integration.ejected")
        assert ej["proposal_ids"] == ["p4"] and ej["reapplied"] == ["p5", "p6"]
        assert stacker.state.why_blocked["p4"]["state"] == "ejected"
        assert canvas.included == ["p0", "p1", "p2", "p3", "p5", "p6"]
        final = reports[-1]
        assert final["head_ref"] == canvas.head and final["included_proposals"] == canvas.included
        assert final["environment_digest"].startswith("sha256:")
        assert "BROKEN" not in git(big_repo, "ls-tree", "--name-only", canvas.head)
    finally:
        canvas.close()


def test_no_worker_profile_ever_holds_an_integration_admin_tool() -> None:
    """apply/commit/merge/promote/rollback/checkpoint exist only as admin
    methods; no policy x card x capability combination grants one."""
    import itertools

    from registry.contracts import load_registry
    from registry.grant_errors import AdminNotGrantable, EmptyGrant
    from registry.grant_scope import derive_scope
    reg = load_registry()
    admin = reg.admin_methods()
    assert {"apply_patch", "checkpoint", "rollback", "promote"} <= admin
    forbidden = ("apply", "commit", "merge", "promote", "rollback", "checkpoint")
    caps = sorted(reg.resolver["capabilities"])
    granted = 0
    for policy_id in sorted(reg.policy["policies"]):
        for card in sorted(reg.cards):
            for r in (1, 2):
                for combo in itertools.combinations(caps, r):
                    try:
                        scope = derive_scope(reg, policy_id=policy_id, card_ref=card,
                                             required_capabilities=combo)
                    except (AdminNotGrantable, EmptyGrant):  # the two refusals; any other error fails
                        continue
                    granted += 1
                    assert not set(scope.allowed_methods) & admin
                    assert not any(f in m for m in scope.allowed_methods for f in forbidden), scope.allowed_methods
    assert granted > 0


def test_canvas_handles_create_delete_mode_binary_and_rename(big_repo: Path) -> None:
    import os
    import subprocess

    from tests.integration.conftest import git_bytes
    base = head(big_repo)

    def change(r: Path) -> None:
        (r / "new dir").mkdir()
        (r / "new dir" / "n.txt").write_text("new\n")
        (r / "f01.txt").unlink()
        os.chmod(r / "f02.txt", 0o755)
        (r / "img.bin").write_bytes(bytes(range(256)) * 40)
        (r / "f03.txt").rename(r / "moved.txt")
    change(big_repo)
    git(big_repo, "add", "-A")
    raw = git_bytes(big_repo, "diff", "--binary", "--full-index", "-M", "--cached", "HEAD")
    git(big_repo, "reset", "-q", "--hard")
    git(big_repo, "clean", "-qfdx")
    assert b"rename from f03.txt" in raw
    from registry.diffs import describe_diff
    d = describe_diff(raw, base)
    prop = {"proposal_id": "mixed", "base_ref": base,
            "base_tree_hash": git(big_repo, "rev-parse", base + "^{tree}"),
            "diff_canonicalization": d["diff_canonicalization"], "diff_digest": d["diff_digest"],
            "touched_files": d["touched_files"], "risk": "low", "declared_constraints": {}}
    pol = IntegrationPolicy(allow_exec_bit=True)
    canvas, stacker, events, plan = _stack(big_repo, [(prop, d["canonical"])], pol)
    try:
        assert canvas.included == ["mixed"]
        git(big_repo, "checkout", "-q", "--detach", base)
        subprocess.run(["git", "apply", "--index"], input=d["canonical"], cwd=big_repo, check=True)
        assert git(big_repo, "write-tree") == canvas.checkpoints[-1].tree
    finally:
        canvas.close()


def test_per_batch_checkpoints(big_repo: Path) -> None:
    props = [make_proposal(big_repo, f"p{k}", edit_line(f"f{k:02d}.txt", 4, f"b{k}")) for k in range(5)]
    pol = IntegrationPolicy(checkpoint_strategy="per_batch", batch_size=2)
    canvas, stacker, events, plan = _stack(big_repo, props, pol)
    try:
        assert [cp.proposal_ids for cp in canvas.checkpoints] == [("p0", "p1"), ("p2", "p3"), ("p4",)]
        trailers = git(big_repo, "log", "-1", "--format=%B", canvas.checkpoints[0].commit)
        assert "Dome-Proposal: p0\nDome-Proposal: p1" in trailers
        assert plan.to_dict()["checkpoint_strategy"] == "per_batch"
        res = stacker.state.apply_results
        assert res["p0"]["checkpoint_id"] == res["p1"]["checkpoint_id"] == canvas.checkpoints[0].checkpoint_id
    finally:
        canvas.close()
