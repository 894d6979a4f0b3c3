"""`dome gc REPO [--keep N] [--dry-run] [--json]`: prune the refs runs leave behind.

Each run keeps its integration checkpoints and head under
`refs/dome/runs/<run_id>/` in the target repository (so `dome verify` can
re-read them). They add up; `dome gc` deletes them for all but the newest N
runs (default 20). Promoted work is never affected: it lives on the branch a
run promoted to. Exit codes: 0 done, 2 not a git repository or bad
arguments, 3 git failed.
"""
from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from registry.errors import DomeError

from .main import EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, add_common_arguments, report_error

RUN_REFS = "refs/dome/runs/"
DEFAULT_KEEP = 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repo", metavar="REPO", help="the target repository of the runs")
    parser.add_argument("--keep", type=int, default=DEFAULT_KEEP, metavar="N",
                        help=f"keep the refs of the newest N runs (default {DEFAULT_KEEP})")
    parser.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    add_common_arguments(parser)


def runs_to_prune(refs: list[str], keep: int) -> dict[str, list[str]]:
    """run id -> its refs, for every run but the newest `keep` (pure). Run ids
    start with their UTC start time, so their order is their age."""
    by_run: dict[str, list[str]] = {}
    for ref in refs:
        run_id = ref[len(RUN_REFS):].split("/", 1)[0]
        by_run.setdefault(run_id, []).append(ref)
    newest_first = sorted(by_run, reverse=True)
    return {r: sorted(by_run[r]) for r in newest_first[max(0, keep):]}


def _git(repo: Path, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True, text=True,
                          timeout=120)
    if proc.returncode != 0:
        raise DomeError(f"git {args[0]} failed: {proc.stderr.strip()[:300]}", code="GIT_FAILED",
                        details={"repo": str(repo)})
    return proc.stdout


def run(args: argparse.Namespace) -> int:
    repo = Path(args.repo)
    if args.keep < 0:
        report_error("gc", DomeError("--keep must be 0 or more", code="USAGE"), as_json=args.json)
        return EXIT_USAGE
    probe = subprocess.run(["git", "-C", str(repo), "rev-parse", "--git-dir"], capture_output=True, timeout=30)
    if not repo.is_dir() or probe.returncode != 0:
        report_error("gc", DomeError(f"{repo} is not a git repository", code="REPO_NOT_FOUND",
                                     hints=["give the repository the runs promoted into"]), as_json=args.json)
        return EXIT_USAGE
    try:
        refs = _git(repo, "for-each-ref", "--format=%(refname)", RUN_REFS).split()
        prune = runs_to_prune(refs, args.keep)
        doomed = [r for refs_of_run in prune.values() for r in refs_of_run]
        if doomed and not args.dry_run:
            _git(repo, "update-ref", "--stdin", stdin="".join(f"delete {r}\n" for r in doomed))
    except DomeError as exc:
        report_error("gc", exc, as_json=args.json)
        return EXIT_INTERNAL
    kept = len({r[len(RUN_REFS):].split("/", 1)[0] for r in refs}) - len(prune)
    if args.json:
        print(json.dumps({"repo": str(repo), "kept_runs": kept, "pruned_runs": sorted(prune),
                          "deleted_refs": len(doomed), "dry_run": args.dry_run}, sort_keys=True))
    else:
        verb = "would delete" if args.dry_run else "deleted"
        print(f"{verb} {len(doomed)} ref(s) of {len(prune)} run(s); kept the newest {kept} run(s)")
    return EXIT_OK
