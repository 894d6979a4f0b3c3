"""Derived bases: a dependent task sees its dependencies' output."""
from __future__ import annotations

import subprocess
from pathlib import Path

from hypothesis import given, strategies as st

from coordinator.runloop.derived_base import (
    DerivedBaseError, build_derived_base, plan_derived_base, transitive_dependencies,
)
from tests.conftest import git


def _diff(repo: Path, edit) -> bytes:
    """A real `git diff --binary` of an edit made in the worktree, then undone."""
    edit(repo)
    git(repo, "add", "-A")
    out = subprocess.run(["git", "diff", "--cached", "--binary", "--full-index"], cwd=repo,
                         capture_output=True, check=True).stdout
    git(repo, "reset", "-q", "--hard")
    git(repo, "clean", "-qfd")
    return out


def test_derived_base_applies_dependency_patches_in_order(git_repo: Path) -> None:
    base = git(git_repo, "rev-parse", "HEAD")
    d1 = _diff(git_repo, lambda r: (r / "mask.txt").write_text("mask\n"))
    d2 = _diff(git_repo, lambda r: (r / "README.md").write_text("hello\nmore\n"))
    props = [{"proposal_id": "p1", "diff_digest": "sha256:1", "d": d1},
             {"proposal_id": "p2", "diff_digest": "sha256:2", "d": d2}]
    db = build_derived_base(git_repo, base, props, lambda p: p["d"], ref_name="refs/dome/bases/r/n")
    assert db.parent == base
    assert git(git_repo, "show", f"{db.base_ref}:mask.txt") == "mask"
    assert git(git_repo, "rev-parse", f"{db.base_ref}^") == base
    assert git(git_repo, "rev-parse", f"{db.base_ref}^{{tree}}") == db.base_tree_hash
    assert git(git_repo, "rev-parse", "refs/dome/bases/r/n") == db.base_ref
    # the repository's own index and worktree are untouched
    assert git(git_repo, "status", "--porcelain") == ""
    # deterministic: the same inputs give the same commit
    again = build_derived_base(git_repo, base, props, lambda p: p["d"], ref_name="refs/dome/bases/r/n2")
    assert again.base_ref == db.base_ref
    assert db.to_event("n")["applied"] == [{"proposal_id": "p1", "diff_digest": "sha256:1"},
                                            {"proposal_id": "p2", "diff_digest": "sha256:2"}]


def test_derived_base_fails_typed_on_missing_or_bad_diff(git_repo: Path) -> None:
    base = git(git_repo, "rev-parse", "HEAD")
    try:
        build_derived_base(git_repo, base, [{"proposal_id": "p"}], lambda p: None, ref_name="refs/dome/x")
    except DerivedBaseError as exc:
        assert exc.code == "DERIVED_BASE_FAILED" and exc.details["proposal_id"] == "p"
    else:
        raise AssertionError("missing diff accepted")
    bad = b"diff --git a/nope b/nope\n--- a/nope\n+++ b/nope\n@@ -1 +1 @@\n-x\n+y\n"
    try:
        build_derived_base(git_repo, base, [{"proposal_id": "p"}], lambda p: bad, ref_name="refs/dome/x")
    except DerivedBaseError as exc:
        assert "stderr" in exc.details
    else:
        raise AssertionError("unappliable diff accepted")


def test_plan_orders_ancestors_and_skips_those_without_proposals() -> None:
    deps = {"drc": ["opt"], "opt": ["prep"], "prep": [], "other": []}
    winners = {"opt": {"proposal_id": "po"}, "prep": {"proposal_id": "pp"}}
    assert transitive_dependencies("drc", deps) == ["prep", "opt"]
    assert [p["proposal_id"] for p in plan_derived_base("drc", deps, winners)] == ["pp", "po"]
    assert plan_derived_base("other", deps, winners) == []


@given(st.dictionaries(st.sampled_from("abcdefg"), st.lists(st.sampled_from("abcdefg"), max_size=3), max_size=7))
def test_ancestors_come_before_their_descendants(raw: dict) -> None:
    # keep it acyclic: only edges to letters earlier in the alphabet
    deps = {n: [d for d in ds if d < n] for n, ds in raw.items()}
    for node in deps:
        order = transitive_dependencies(node, deps)
        assert node not in order and len(order) == len(set(order))
        for i, n in enumerate(order):
            assert all(d in order[:i] for d in deps.get(n, []))


def test_a_dependent_task_sees_its_dependency_output_in_a_real_run(git_repo: Path, tmp_path: Path) -> None:
    """`use` fails unless the file `make` proposed is in its checkout."""
    import json

    from tests.conftest import dome_cli

    queue = {
        "artifact_kind": "dome.work.queue/v1", "name": "dep", "repo": str(git_repo), "base_ref": "HEAD",
        "determinism_seed": 3, "policy": "default", "promote_to": "refs/heads/out",
        "tasks": [
            {"node_id": "make", "required_capabilities": ["write"], "required_outputs": ["patch_proposal"],
             "containers": [], "dependencies": [],
             "action_spec": {"intent": "command", "argv": ["sh", "-c", "echo made > made.txt"]}},
            {"node_id": "use", "required_capabilities": ["read"], "required_outputs": [], "containers": [],
             "dependencies": ["make"], "action_spec": {"intent": "command", "argv": ["test", "-f", "made.txt"]}},
        ],
        "validations": [{"suite": "command", "argv": ["test", "-f", "made.txt"], "required": True}],
    }
    qfile = tmp_path / "q.json"
    qfile.write_text(json.dumps(queue))
    ops = tmp_path / "ops"
    r = dome_cli("run", str(qfile), "--ops-root", str(ops), "--json", timeout=240)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == "promoted", r.stderr[-2000:]
    ev = dome_cli("events", out["run_id"], "--ops-root", str(ops), "--json").stdout.splitlines()
    derived = [json.loads(line) for line in ev if '"task.base_derived"' in line]
    assert derived and all(d["node_id"] == "use" for d in derived)
    p = derived[0]["payload"]
    assert p["parent"] == git(git_repo, "rev-parse", "HEAD") and p["applied"][0]["proposal_id"]
    assert dome_cli("verify", out["run_id"], "--ops-root", str(ops)).returncode == 0
