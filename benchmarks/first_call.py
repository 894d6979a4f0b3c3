"""A worker's CPU before its first gateway call, per source tree.

    python benchmarks/first_call.py [--tasks 20] [--sandbox bwrap|none] [--tree DIR[,DIR]]

Runs N trivial command tasks (the scale curve's 200-file repository) with each dome source tree,
alternating. Each command reads its worker's CPU from `/proc/<worker>/schedstat` (nanoseconds on
the CPU) and commits the figure: what the worker spent from its start (a fork of the zygote, or a
fresh interpreter) until its action began, that is its spawn spec and grant checked, its checkout
made and its gateway client ready to call, plus starting the command itself, but not its child
processes (git); and the attempt's cgroup count at that moment (every process of the attempt since
it joined its groups: bwrap, the stub, the zygote's child entering the sandbox, the worker and its
git processes). Prints the quartiles per tree.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale_curve  # noqa: E402 - the same repository and queue

ROOT = Path(__file__).resolve().parents[1]
# the worker's own CPU (ns, its children not counted) and its attempt's cgroup (ns: every process of
# the attempt since it joined, bwrap and the git processes included); each attempt has a fresh group
# (as many slots as tasks), so the group's count is this attempt's alone
PROBE = ("mkdir -p out && read -r ns _ < /proc/$PPID/schedstat && "
         "{{ read -r cg < /dome/cgroup/cpuacct/cpuacct.usage || cg=0; }} && echo $ns $cg > out/cpu{i:05d}.txt")


def one_tree(tree: Path, n: int, sandbox: str) -> list[tuple[float, float]]:
    root = Path(tempfile.mkdtemp(prefix="dome-first-call-")).resolve()
    try:
        repo = scale_curve.make_repo(root)
        queue = scale_curve.write_queue(root, repo, n, n)
        q = json.loads(queue.read_text())
        for i, task in enumerate(q["tasks"]):
            task["action_spec"]["argv"] = ["sh", "-c", PROBE.format(i=i)]
        queue.write_text(json.dumps(q))
        env = {**os.environ, "PYTHONPATH": str(tree)}
        out = subprocess.run([sys.executable, str(tree / "benchmarks" / "scale_curve.py"), "--one", str(n),
                              "--root", str(root), "--sandbox", sandbox], env=env, capture_output=True, text=True,
                             timeout=3600)
        if out.returncode != 0:
            raise SystemExit(f"{tree}: the run failed: {out.stderr[-2000:]}")
        names = subprocess.run(["git", "-C", str(repo), "ls-tree", "--name-only", "refs/heads/dome/scale", "out/"],
                               capture_output=True, text=True, check=True).stdout.split()
        rows = [subprocess.run(["git", "-C", str(repo), "show", f"refs/heads/dome/scale:{name}"],
                               capture_output=True, text=True, check=True).stdout.split() for name in names]
        return [(int(own) / 1e6, int(group) / 1e6) for own, group in rows]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("--sandbox", default="bwrap", choices=["bwrap", "none"])
    ap.add_argument("--tree", default=str(ROOT), help="comma-separated dome source trees, run alternately")
    a = ap.parse_args(argv)
    for tree in (Path(t).resolve() for t in a.tree.split(",")):
        rows = one_tree(tree, a.tasks, a.sandbox)
        out = {"tree": str(tree), "sandbox": a.sandbox, "tasks": len(rows)}
        for i, name in enumerate(("worker_ms", "attempt_group_ms")):
            ms = sorted(r[i] for r in rows)
            q = statistics.quantiles(ms, n=4) if len(ms) > 1 else [ms[0]] * 3
            out[name] = {"p25": round(q[0], 2), "p50": round(q[1], 2), "p75": round(q[2], 2)}
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
