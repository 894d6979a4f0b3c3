"""Stacking benchmark: 200 non-overlapping proposals on a 1,000-file repo.

Two contenders in the same process, on the same diffs and the same base:

- plain: a worktree at the base, then for each diff
  `git apply --3way PATCH && git commit -m ...` (porcelain, no verification);
- dome:  verify every proposal (base tree hash, re-canonicalized digest,
  policy checks, apply-check against the exact base), plan the stack, then
  apply each layer on the canvas with a checkpoint commit per layer
  (trailers, refs), i.e. everything `finish_run` does before validation.

Both must end on the same tree; the script checks it. Usage:
    python benchmarks/stacking.py [--files 1000] [--proposals 200] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coordinator.integration.canvas import Canvas  # noqa: E402
from coordinator.integration.gitio import ObjectReader  # noqa: E402
from coordinator.integration.planning import Candidate, plan_stack  # noqa: E402
from coordinator.integration.policy import IntegrationPolicy  # noqa: E402
from coordinator.integration.proposals import BaseInspector, verify_proposal  # noqa: E402
from registry import diffs  # noqa: E402

ENV = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "b",
       "GIT_COMMITTER_EMAIL": "b@x", "GIT_CONFIG_NOSYSTEM": "1"}


def git(cwd: Path, *args: str, input: bytes | None = None) -> bytes:
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, input=input, check=True,
                          capture_output=True).stdout


def make_repo(root: Path, n_files: int) -> tuple[Path, str]:
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for k in range(n_files):
        d = repo / f"pkg{k // 50:02d}"
        d.mkdir(exist_ok=True)
        (d / f"mod{k:04d}.py").write_text("".join(f"value_{k}_{i} = {i}\n" for i in range(40)))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    return repo, git(repo, "rev-parse", "HEAD").decode().strip()


def make_proposals(repo: Path, base: str, n_files: int, n: int) -> list[tuple[dict, bytes]]:
    step = max(1, n_files // n)
    for j in range(n):
        k = j * step
        p = repo / f"pkg{k // 50:02d}" / f"mod{k:04d}.py"
        lines = p.read_text().splitlines(keepends=True)
        lines[20] = f"value_{k}_20 = {j} * 1000  # proposal {j}\n"
        p.write_text("".join(lines))
    git(repo, "add", "-A")
    raw = git(repo, *diffs.DIFF_GIT_ARGS, "--cached", base)
    git(repo, "reset", "-q", "--hard", base)
    parsed = diffs.parse_diff(raw)
    tree = git(repo, "rev-parse", base + "^{tree}").decode().strip()
    out = []
    for j, fp in enumerate(parsed.files):
        d = diffs.describe_diff(diffs.serialize_diff(diffs.ParsedDiff((fp,))), base)
        out.append(({"proposal_id": f"p{j:03d}", "base_ref": base, "base_tree_hash": tree,
                     "diff_canonicalization": d["diff_canonicalization"],
                     "diff_digest": d["diff_digest"], "touched_files": d["touched_files"],
                     "risk": {"class": "low"}, "declared_constraints": {"no_deps": True},
                     "atomicity": "atomic_proposal", "created_at": "2026-01-01T00:00:00Z"},
                    d["canonical"]))
    return out


def plain_loop(repo: Path, base: str, props: list[tuple[dict, bytes]], root: Path) -> tuple[float, str]:
    wt = root / "plain"
    git(repo, "worktree", "add", "-q", "--detach", str(wt), base)
    patches = []
    for prop, diff in props:
        f = root / f"{prop['proposal_id']}.patch"
        f.write_bytes(diff)
        patches.append((prop["proposal_id"], f))
    t0 = time.perf_counter()
    for pid, f in patches:
        git(wt, "apply", "--3way", str(f))
        git(wt, "commit", "-q", "-m", f"apply {pid}")
    dt = time.perf_counter() - t0
    return dt, git(wt, "rev-parse", "HEAD^{tree}").decode().strip()


def dome_stack(repo: Path, base: str, props: list[tuple[dict, bytes]]) -> tuple[float, dict, str]:
    from coordinator.integration.stacking import Stacker
    policy = IntegrationPolicy()
    events: list = []
    t0 = time.perf_counter()
    checked = {}
    reader = ObjectReader(repo)  # shared: the canvas re-reads the blobs verification read
    insp = BaseInspector(repo, reader)
    for prop, diff in props:
        rej, cp = verify_proposal(prop, diff, wave_base=base, policy=policy, inspector=insp)
        assert not rej, rej
        checked[cp.proposal_id] = cp
    t_verify = time.perf_counter() - t0
    cands = [Candidate.from_proposal(c.proposal, c.fingerprints, c.parsed.touched_files(), policy)
             for c in checked.values()]
    plan, index = plan_stack(cands, base_ref=base, seed=1, policy=policy, run_id="bench")
    t_plan = time.perf_counter() - t0 - t_verify
    canvas = Canvas(repo, base, run_id="bench", create_worktree=True, reader=reader)
    try:
        Stacker(canvas, checked, plan, index, policy, emit=lambda t, a: events.append(t)).run()
        dt = time.perf_counter() - t0
        assert len(canvas.checkpoints) == len(props)
        return dt, {"verify_s": t_verify, "plan_s": t_plan, "stack_s": dt - t_verify - t_plan,
                    "checkpoints": len(canvas.checkpoints), "events": len(events)}, canvas.checkpoints[-1].tree
    finally:
        canvas.close()
        reader.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--proposals", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dome-bench-") as tmp:
        root = Path(tmp)
        repo, base = make_repo(root, args.files)
        props = make_proposals(repo, base, args.files, args.proposals)
        plain_s, plain_tree = plain_loop(repo, base, props, root)
        dome_s, parts, dome_tree = dome_stack(repo, base, props)
    assert plain_tree == dome_tree, "both loops must end on the same tree"
    res = {"files": args.files, "proposals": len(props), "plain_apply_commit_s": round(plain_s, 3),
           "dome_verify_plan_stack_checkpoint_s": round(dome_s, 3),
           "speedup": round(plain_s / dome_s, 1),
           "per_proposal_ms": {"plain": round(1000 * plain_s / len(props), 2),
                               "dome": round(1000 * dome_s / len(props), 2)},
           "dome_breakdown_s": {k: round(v, 3) if isinstance(v, float) else v for k, v in parts.items()},
           "same_final_tree": plain_tree == dome_tree}
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"{res['proposals']} non-overlapping proposals on {res['files']} files, checkpoint per layer")
        print(f"  plain git apply --3way && git commit : {plain_s:7.3f} s "
              f"({res['per_proposal_ms']['plain']} ms/proposal, no verification)")
        print(f"  dome verify + plan + stack           : {dome_s:7.3f} s "
              f"({res['per_proposal_ms']['dome']} ms/proposal)  x{res['speedup']} faster")
        print(f"  dome breakdown: {res['dome_breakdown_s']}")
        print(f"  same final tree: {res['same_final_tree']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
