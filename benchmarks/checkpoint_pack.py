"""What the stack's checkpoints cost as the run grows: trees as deltas beside trees whole.

    python benchmarks/checkpoint_pack.py [--sizes 1000,10000] [--json]

The integration canvas writes a checkpoint tree per proposal. In the scale
curve's run every proposal adds one file to `out/`, so the k-th checkpoint's
`out` tree holds k entries: stored whole, the stack compresses N squared
bytes in all, and the coordinator's CPU per proposal grows with N. This
benchmark drives the canvas's own tree code (`TreeState` on an `ObjectStore`
over a real bare repository: a 200-file base, one new file per proposal, a
tree written per proposal, packs flushed as a run flushes them) twice in one
process: as the canvas does now (each tree a delta against the directory's
previous tree) and with every object stored whole (before). Printed per N:
this process's CPU per proposal (building, hashing, compressing, sending the
pack), the CPU of the `git index-pack` processes that take the packs (child
processes, which the scale curve's figure does not include), and the packs'
bytes. Both ways must leave the same final tree, which git reads back.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coordinator.integration import gitio  # noqa: E402
from coordinator.integration.tree_state import TreeState  # noqa: E402

BASE_FILES = 200


def _base(repo: Path) -> str:
    """A 200-file base tree (and its blobs) written straight into the repository."""
    writer = gitio.ObjectWriter(repo)
    entries = [("100644", f"f{i:03d}.txt", writer.write("blob", b"%d\n" % i)) for i in range(BASE_FILES)]
    return writer.write("tree", gitio.format_tree(entries))


def _stack(repo: Path, root: str, n: int, deltas: bool) -> str:
    with gitio.ObjectReader(repo) as reader:
        store = gitio.ObjectStore(repo, reader)
        if not deltas:  # before: the base hint dropped, every object stored whole
            write = store.write
            store.write = lambda typ, data, base=None: write(typ, data)  # type: ignore[method-assign]
        tree = TreeState(store, store, root)
        for i in range(n):
            tree.set(f"out/i{i:06d}.txt", "100644", store.write("blob", b"%d\n" % i))
            tree.write()
        store.flush()
        return tree.root


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def one(n: int, deltas: bool) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="dome-ckpt-"))
    try:
        repo = tmp / "repo.git"
        subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
        root = _base(repo)
        c0, k0, t0 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), time.perf_counter()
        final = _stack(repo, root, n, deltas)
        c1, k1, t1 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), time.perf_counter()
        out = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "--name-only", final], check=True,
                             capture_output=True, text=True).stdout.split()
        assert len(out) == BASE_FILES + n, len(out)
        pack_bytes = sum(p.stat().st_size for p in (repo / "objects" / "pack").glob("*.pack"))
        return {"n": n, "way": "deltas" if deltas else "whole (before)", "final_tree": final,
                "cpu_ms_per_proposal": round(1000 * (c1 - c0) / n, 3),
                "index_pack_cpu_ms_per_proposal": round(1000 * (k1 - k0) / n, 3),
                "pack_bytes": pack_bytes, "wall_s": round(t1 - t0, 2)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    rows = []
    for n in (int(x) for x in a.sizes.split(",")):
        now, before = one(n, True), one(n, False)
        if now["final_tree"] != before["final_tree"]:
            raise SystemExit(f"N={n}: the two ways left different trees")
        rows += [now, before]
        if not a.json:
            for r in (now, before):
                print(f"N={n:>6} {r['way']:>15}: {r['cpu_ms_per_proposal']:7.3f} ms/proposal here, "
                      f"{r['index_pack_cpu_ms_per_proposal']:7.3f} in git index-pack, "
                      f"pack {r['pack_bytes'] / 2**20:8.1f} MiB, {r['wall_s']:6.1f} s")
            print(f"N={n:>6} ratio (deltas / whole): {now['cpu_ms_per_proposal'] / before['cpu_ms_per_proposal']:.2f}x "
                  f"here, {now['index_pack_cpu_ms_per_proposal'] / max(before['index_pack_cpu_ms_per_proposal'], 1e-9):.2f}x "
                  f"in index-pack", flush=True)
    if a.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
