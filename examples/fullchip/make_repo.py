#!/usr/bin/env python3
"""Create the git repository the fullchip example works on, and (for maintainers) its work queues.

    python examples/fullchip/make_repo.py [--out examples/fullchip/repo] [--force]
    python examples/fullchip/make_repo.py --write-queues

The repository holds:

    layouts/block.oas, layouts/block_quick.oas   IHP SG13G2 Metal1, scaled (see README.md)
    kernels/iccad13/...                          the pinned SOCS kernels (ICCAD 2013, via OpenILT)
    masks/<layout>.tiles/plan.json               the tile plans the tile tasks are bound to
    LICENSES/, README.md

`dome run examples/fullchip/work.quick.json` (16 tiles) or `work.queue.json`
(the whole block) then optimises the tiles wave by wave, stitches them into
masks/<layout>.oas, evaluates the full layout and promotes with evidence.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from registry import mask_rules  # noqa: E402
from registry.datasets import iccad13_data  # noqa: E402

KERNELS = "kernels/iccad13"
MRC = {"min_feature_nm": mask_rules.MIN_WIDTH_NM, "min_area_nm2": mask_rules.MIN_AREA_NM2}
# queue file: (layout, ILT iterations per tile, tiles per task, promote_to, evaluation level, endgame duplicates);
# the quick variant runs on 2-core CI machines, where a duplicate would only compete for the same cores
VARIANTS = {
    "work.quick.json": ("block_quick", 8, 2, "refs/heads/masks-quick", "detailed", 0),
    "work.queue.json": ("block", None, 8, "refs/heads/masks", "detailed", 1),
}

REPO_TESTS = '''"""The repository's own checks: the stitched mask matches its report, every tile core its record."""
import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_mask_report_names_the_committed_mask_bytes():
    for rp in sorted((ROOT / "masks").glob("*.litho.json")) if (ROOT / "masks").is_dir() else []:
        rep = json.loads(rp.read_text())
        data = (ROOT / rep["mask"]).read_bytes()
        assert rep["mask_file_digest"] == "sha256:" + hashlib.sha256(data).hexdigest()
        assert (ROOT / rep["layout"]).is_file()


def test_every_tile_core_matches_its_record():
    metas = [m for kind in ("raw", "clean") for m in ROOT.glob(f"masks/*.tiles/{kind}/*.json")]
    for meta in sorted(metas):
        rec = json.loads(meta.read_text())
        data = meta.with_suffix(".npy").read_bytes()
        assert rec["digest"] == "sha256:" + hashlib.sha256(data).hexdigest(), meta
'''

TESTS_SUITE = {"suite": "command", "name": "tests", "argv": ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
               "required": True, "timeout_s": 600}

README = """# Tiled ILT of an IHP SG13G2 Metal1 block

`layouts/block.oas` is Metal1 of IHP SG13G2 device cells (ihp-gdsfactory
2.0.0, Apache-2.0), scaled by 0.4 to the ICCAD 2013 M1 node and placed in a
block of about 20.4 um x 20.7 um; `layouts/block_quick.oas` is a 3 um x 3 um
crop of it. Masks land in `masks/` only through dome: tiles are optimised
wave by wave into `masks/<layout>.tiles/`, stitched into `masks/<layout>.oas`
with its metrics report, and re-simulated over the whole layout before
promotion. Licenses: LICENSES/.
"""


def git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "dome example", "GIT_AUTHOR_EMAIL": "example@dome.invalid",
           "GIT_COMMITTER_NAME": "dome example", "GIT_COMMITTER_EMAIL": "example@dome.invalid",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
    subprocess.run(["git", *args], cwd=repo, check=True, env=env, capture_output=True)


def request(layout: str, iterations: int | None) -> dict:
    """The optimize request every task of a variant makes (the tile folder is bound to it)."""
    req = {"layout": f"layouts/{layout}.oas", "out": f"masks/{layout}.oas", "kernels": KERNELS,
           "fill": "lithobench", "seed": 0, "mrc": dict(MRC), "tiling": {"dir": f"masks/{layout}.tiles"}}
    if iterations:
        req["iterations"] = iterations
    return req


def _in(repo: Path, req: dict) -> dict:
    out = dict(req)
    for k in ("layout", "out", "kernels"):
        out[k] = str(repo / req[k])
    out["tiling"] = {"dir": str(repo / req["tiling"]["dir"])}
    return out


def make_repo(out: Path, data: Path, *, force: bool = False, variants: tuple[str, ...] = tuple(VARIANTS)) -> Path:
    from worker_sdk.litho.tiledjob import prepare

    if out.exists():
        if not force:
            raise SystemExit(f"{out} exists; pass --force to recreate it")
        shutil.rmtree(out)
    shutil.copytree(HERE / "layouts", out / "layouts")
    kdir = out / KERNELS / "kernels_bin"
    for corner in ("focus", "defocus"):
        shutil.copytree(data / "kernels_bin" / corner, kdir / corner)
    shutil.copytree(HERE / "LICENSES", out / "LICENSES")
    for lic in ("OpenILT_LICENSE_MIT.txt",):
        shutil.copy(data / "licenses" / lic, out / "LICENSES" / lic)
    for v in variants:
        layout, iters, *_ = VARIANTS[v]
        prepare(_in(out, request(layout, iters)))
    (out / "tests").mkdir()
    (out / "tests" / "test_repository.py").write_text(REPO_TESTS)
    (out / "README.md").write_text(README)
    (out / ".gitattributes").write_text("*.oas binary\n*.npy binary\n*.bin binary\n")
    git(out, "init", "-q", "-b", "main")
    git(out, "add", "-A")
    git(out, "commit", "-q", "-m", "IHP SG13G2 Metal1 block, kernels and tile plans")
    return out


def write_queues(data: Path, directory: Path = HERE) -> list[Path]:
    import tempfile

    from worker_sdk.litho.tiledjob import prepare
    from worker_sdk.litho.tilequeue import tile_queue

    written = []
    with tempfile.TemporaryDirectory() as tmp:
        for fname, (layout, iters, batch, target, level, dups) in VARIANTS.items():
            req = request(layout, iters)
            shutil.copytree(HERE / "layouts", Path(tmp) / "layouts", dirs_exist_ok=True)
            plan = prepare({**_in(Path(tmp), req), "kernels": str(data)})
            q = tile_queue(plan, layout=req["layout"], out=req["out"], tile_dir=req["tiling"]["dir"],
                           kernels=KERNELS, name=f"fullchip-{layout}", batch_size=batch, iterations=iters,
                           mrc=MRC, promote_to=target, evaluate_level=level, endgame_max_duplicates=dups,
                           validations=[TESTS_SUITE])
            path = directory / fname
            path.write_text(json.dumps(q, indent=2) + "\n")
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "repo")
    ap.add_argument("--data", type=Path, default=None, help="the ICCAD 2013 data folder (kernels)")
    ap.add_argument("--force", action="store_true", help="recreate the repository if it exists")
    ap.add_argument("--write-queues", action="store_true",
                    help="(maintainers) regenerate work.queue.json and work.quick.json beside this script")
    args = ap.parse_args(argv)
    data = args.data or iccad13_data() or ROOT / "examples" / "iccad13" / "data"
    if not (data / "kernels_bin").is_dir():
        print(f"make_repo: no ICCAD 2013 kernels at {data}; pass --data or set DOME_ICCAD13_DATA", file=sys.stderr)
        return 2
    if args.write_queues:
        for p in write_queues(data):
            print(p)
        return 0
    print(make_repo(args.out.resolve(), data, force=args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
