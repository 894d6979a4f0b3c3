"""The toolz example (examples/toolz-tools) beside its sequential baseline.

- sequential: the example's good tools one after another in one checkout,
  then the project's tests once (no sandbox, no integration);
- dome: `dome run` of the example's queue on a fresh copy (seventeen tool
  workers and the bad task in bubblewrap, integration, five validations,
  the gate), and where its time went (tasks, each validation, the rest);
- validation in the sandbox beside the same command outside it, on the same
  read-only checkout, interleaved: wall time and the command's own CPU time
  (bash's `time` inside the sandbox).

Usage: python benchmarks/toolz_tools.py [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
EXAMPLE = ROOT / "examples" / "toolz-tools"
TESTS = ["python3", "-m", "pytest", "-q", "toolz/tests"]


def make_repo(out: Path) -> Path:
    subprocess.run([sys.executable, str(EXAMPLE / "make_repo.py"), "--out", str(out)], check=True,
                   capture_output=True, timeout=120)
    return out


def sequential(tmp: Path, queue: dict) -> dict[str, float]:
    repo = make_repo(tmp / "seq")
    t0 = time.perf_counter()
    for t in queue["tasks"]:
        if not t["node_id"].startswith("bad-"):  # the baseline runs the good tools only
            subprocess.run(t["action_spec"]["argv"], cwd=repo, capture_output=True, timeout=300)
    t1 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "toolz/tests"],
                       cwd=repo, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-1000:]
    return {"tools_s": t1 - t0, "tests_s": time.perf_counter() - t1, "total_s": time.perf_counter() - t0}


def dome_run(tmp: Path, queue: dict) -> dict[str, float]:
    from coordinator.report.build import build_report
    from ledger import Ledger
    repo = make_repo(tmp / "dome")
    q = {**queue, "repo": str(repo)}
    (tmp / "q.json").write_text(json.dumps(q))
    ops = tmp / "ops"
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "coordinator.cli.main", "run", str(tmp / "q.json"),
                        "--ops-root", str(ops)], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t0
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    led = Ledger.open(None, ops, must_exist=True)
    m = build_report(led, ops, led.run_ids()[-1], pictures=False).model
    tasks = max(a.end for a in m.attempts) - min(a.start for a in m.attempts)
    vals = [p.end - p.start for p in m.phases if p.lane.startswith(("validate", "bisect"))]
    return {"wall_s": wall, "run_s": m.duration_s, "tasks_s": tasks, "validations": len(vals),
            "validation_s": sum(vals), "validation_each_s": sorted(round(v, 2) for v in vals)}


def sandbox_vs_outside(tmp: Path, repeats: int) -> dict[str, list[tuple[float, float]]]:
    from coordinator.integration.canvas import checkout_readonly
    from coordinator.integration.validation import READ_ONLY_TOOL_ENV, bwrap_argv
    repo = make_repo(tmp / "val")
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "main"], capture_output=True, text=True).stdout.strip()
    ro = checkout_readonly(repo, head, tmp / "head")
    env = {"PATH": os.environ["PATH"], "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", **READ_ONLY_TOOL_ENV}
    inner = ["bash", "-c", "TIMEFORMAT='%R %U %S'; time " + " ".join(TESTS) + " >/dev/null"]
    out: dict[str, list[tuple[float, float]]] = {"outside": [], "bwrap": []}
    try:
        for _ in range(repeats):  # interleaved: both see the same load
            for name, cmd in (("outside", inner), ("bwrap", bwrap_argv(ro, inner, env=READ_ONLY_TOOL_ENV))):
                r = subprocess.run(cmd, cwd=ro, env=env, capture_output=True, text=True, timeout=300)
                real, user, sys_ = (float(x) for x in r.stderr.strip().splitlines()[-1].split())
                out[name].append((real, user + sys_))
    finally:
        for root, _dirs, _files in os.walk(ro):
            os.chmod(root, 0o755)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    queue = json.loads((EXAMPLE / "work.queue.json").read_text())
    tmp = Path(tempfile.mkdtemp(prefix="dome-toolz-bench-"))
    try:
        seq = sequential(tmp, queue)
        print(f"sequential: tools {seq['tools_s']:.2f} s, tests {seq['tests_s']:.2f} s, total {seq['total_s']:.2f} s")
        d = dome_run(tmp, queue)
        print(f"dome run: {d['wall_s']:.2f} s wall ({d['run_s']:.2f} s in the ledger): tasks {d['tasks_s']:.2f} s, "
              f"{d['validations']} validations {d['validation_s']:.2f} s {d['validation_each_s']}")
        v = sandbox_vs_outside(tmp, args.repeats)
        for name, rows in v.items():
            print(f"validation {name}: wall " + ", ".join(f"{r:.2f}" for r, _ in rows) + " s; cpu "
                  + ", ".join(f"{c:.2f}" for _, c in rows) + " s")
        best = {k: min(r for r, _ in rows) for k, rows in v.items()}
        print(f"sandbox / outside (best wall): {best['bwrap'] / best['outside']:.2f}x; load average {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
