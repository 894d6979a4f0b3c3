"""The files and directories the coordinator creates per task, by code site.

    python benchmarks/file_creations.py [--n 100] [--baseline REF] [--sandbox none] [--json]

Runs the scale curve's run (N one-file tasks on a 200-file repository, SQLite,
4 in parallel; `benchmarks/scale_curve.py`) in this process with an audit
hook on every `open` with O_CREAT and every `os.mkdir`, and counts, per code
site of the coordinator (the first frame in the tree), the inodes it creates
(the path did not exist) and the opens with O_CREAT of a path that already
existed (which create nothing but show a write that could have been avoided).
The workers are other processes and are not counted; neither are files
SQLite creates itself (its journal and WAL files).

Every new file or directory is a syscall, an inode and later a deletion. On
an ext4 file system without a journal each new inode also scans the inodes
of its block group deleted in the last minute, so while workers delete their
checkouts every file the coordinator creates costs a fraction of a
millisecond of kernel time (see docs/benchmarks-history.md, "File creations per task").

`--baseline REF` measures the same run on the tree of a git commit (extracted
with `git archive` into a temporary folder, run in a fresh interpreter) and
prints its counts beside this tree's.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
O_CREAT = os.O_CREAT


class CreationCounter:
    """An audit hook that counts the inodes code under `root` creates, by site (`path:function`).
    Audit hooks cannot be removed: `active` turns it off."""

    def __init__(self, root: Path) -> None:
        self.root = str(root) + os.sep
        self.skip = str(root / "benchmarks") + os.sep, str(root / "tests") + os.sep
        self.created: collections.Counter[tuple[str, str]] = collections.Counter()  # (kind, site)
        self.existing: collections.Counter[str] = collections.Counter()  # O_CREAT on a path already there
        self.active = False
        self._lock = threading.Lock()

    def site(self) -> str | None:
        """The innermost frame in the tree; None when that is the benchmark's own setup."""
        f = sys._getframe(2)
        while f is not None:
            name = f.f_code.co_filename
            if name.startswith(self.root):
                return None if name.startswith(self.skip) else f"{name[len(self.root):]}:{f.f_code.co_name}"
            f = f.f_back
        return "(outside the tree)"

    def __call__(self, event: str, args: tuple) -> None:
        if not self.active:
            return
        if event == "open":
            path, _mode, flags = args
            if not isinstance(path, (str, bytes, os.PathLike)) or not (flags or 0) & O_CREAT:
                return
            kind = "file"
        elif event == "os.mkdir":
            path, kind = args[0], "dir"
        else:
            return
        site = self.site()
        if site is None:
            return
        there = os.path.lexists(path)
        if not there and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            return  # fails (no parent directory): nothing is created
        with self._lock:
            if there:
                if kind == "file":
                    self.existing[site] += 1
            else:
                self.created[(kind, site)] += 1

    def summary(self, n: int) -> dict:
        by_site = sorted(self.created.items(), key=lambda kv: (-kv[1], kv[0]))
        files = sum(v for (k, _), v in self.created.items() if k == "file")
        dirs = sum(v for (k, _), v in self.created.items() if k == "dir")
        return {"n": n, "per_task": round((files + dirs) / n, 2), "files_per_task": round(files / n, 2),
                "dirs_per_task": round(dirs / n, 2),
                "by_site": {f"{kind} {site}": round(v / n, 2) for (kind, site), v in by_site},
                "ocreat_on_existing": {site: v for site, v in sorted(self.existing.items())}}


def measure(n: int, sandbox: str, tree: Path) -> dict:
    """One run of the scale curve on `tree` (this interpreter must import dome from it)."""
    sys.path.insert(0, str(tree / "benchmarks"))
    import scale_curve  # the tree's own benchmark: its repository, queue and run

    counter = CreationCounter(tree)
    sys.addaudithook(counter)
    if not hasattr(scale_curve, "prepare"):  # a tree from before the run was timed from outside
        counter.active = True
        try:
            out = scale_curve.one(n, None, sandbox, 4)
        finally:
            counter.active = False
        res = counter.summary(n)
        res.update(status=out["status"], wall_s=out["wall_s"], cpu_ms_per_task=out["cpu_ms_per_task"],
                   events_per_task=round(out["events"] / n, 2))
        return res
    counter.active = True  # the repository's making counted too, as before
    try:
        root = scale_curve.prepare(n, 4, None)
        out = scale_curve.one(root, n, None, sandbox, 4)
    finally:
        counter.active = False
    try:
        events = scale_curve.analyse(root, n, None, out["run_id"], False)["events"]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    res = counter.summary(n)
    res.update(status=out["status"], wall_s=out["run_wall_s"], cpu_ms_per_task=round(1000 * out["run_cpu_s"] / n, 1),
               events_per_task=round(events / n, 2))
    return res


def _in_fresh_process(n: int, sandbox: str, tree: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--measure", str(tree), "--n", str(n),
                        "--sandbox", sandbox], env=env, cwd=tree, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"the run on {tree} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _checkout(ref: str, into: Path) -> Path:
    tar = subprocess.run(["git", "-C", str(HERE), "archive", "--format=tar", ref], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar.stdout, check=True)
    return into


def _table(rows: list[tuple[str, dict]]) -> str:
    sites = sorted({s for _, r in rows for s in r["by_site"]})
    head = "| code site | " + " | ".join(name for name, _ in rows) + " |"
    lines = [head, "|---|" + "---|" * len(rows)]
    for s in sites:
        lines.append(f"| {s} | " + " | ".join(f"{r['by_site'].get(s, 0):.2f}" for _, r in rows) + " |")
    for key in ("files_per_task", "dirs_per_task", "per_task"):
        lines.append(f"| **{key.replace('_', ' ')}** | " + " | ".join(f"{r[key]:.2f}" for _, r in rows) + " |")
    lines.append("| O_CREAT on an existing path (whole run) | "
                 + " | ".join(str(sum(r["ocreat_on_existing"].values())) for _, r in rows) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--sandbox", default="none", choices=("none", "bwrap"))
    ap.add_argument("--baseline", metavar="REF", help="a git commit to measure beside this tree")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--measure", metavar="TREE", help=argparse.SUPPRESS)  # one run, in a fresh interpreter
    a = ap.parse_args(argv)
    if a.measure:
        print(json.dumps(measure(a.n, a.sandbox, Path(a.measure).resolve())))
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="dome-fc-") as tmp:
        if a.baseline:
            rows.append((f"baseline {a.baseline}", _in_fresh_process(a.n, a.sandbox, _checkout(a.baseline, Path(tmp)))))
        rows.append(("this tree", _in_fresh_process(a.n, a.sandbox, HERE)))
    if a.json:
        print(json.dumps(dict(rows), indent=2))
    else:
        print(f"N = {a.n}, --sandbox {a.sandbox}: inodes the coordinator creates per task, by code site\n")
        print(_table(rows))
        for name, r in rows:
            print(f"\n{name}: {r['status']}, {r['cpu_ms_per_task']} ms CPU per task (with the audit hook), "
                  f"wall {r['wall_s']} s, {r['events_per_task']} events per task")
    return 0


if __name__ == "__main__":
    sys.exit(main())
