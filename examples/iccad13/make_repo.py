#!/usr/bin/env python3
"""Create the git repository the ICCAD 2013 flagship job works on.

    python examples/iccad13/make_repo.py [--out examples/iccad13/repo] [--data DIR] [--force]

The repository holds what a mask team would keep under version control:

    layouts/M1_test{1..10}.oas   the ten ICCAD 2013 M1 targets (from the .glp files, 1 nm grid, layer 1/0)
    kernels/iccad13/...          the SOCS kernels the masks are optimised and checked against (pinned optics)
    rules/mask_rules.drc         the mask-rule deck (minimum width, space and area) as KLayout Ruby DRC
    rules/mask_rules.py          the same rules as a klayout.db deck
    tests/test_repository.py     the repository's own tests (masks and their reports are consistent)
    README.md, LICENSES/

`dome run examples/iccad13/work.queue.json` then adds one optimized mask per
clip (masks/M1_test<n>.oas + a metrics report) under promotion rules.
"""
from __future__ import annotations

import argparse
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

# Mask rules at wafer scale (1x), in nm: one home, registry/mask_rules.py, which
# the ILT clean-up (mrc-quality) and docs/litho.md share.
RUBY_DECK = mask_rules.ruby_deck()
PY_DECK = mask_rules.python_deck()

REPO_TESTS = '''"""The repository's own checks: every committed mask matches its metrics report."""
import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _reports():
    return sorted((ROOT / "masks").glob("*.litho.json")) if (ROOT / "masks").is_dir() else []


def test_every_mask_has_a_report_and_every_report_a_mask():
    masks = sorted(p.name.split(".")[0] for p in (ROOT / "masks").glob("*.oas")) if (ROOT / "masks").is_dir() else []
    reports = sorted(p.name.split(".")[0] for p in _reports())
    assert masks == reports


def test_reports_name_existing_layouts_and_the_committed_mask_bytes():
    for rp in _reports():
        rep = json.loads(rp.read_text())
        assert (ROOT / rep["layout"]).is_file(), rep["layout"]
        mask = ROOT / rep["mask"]
        digest = "sha256:" + hashlib.sha256(mask.read_bytes()).hexdigest()
        assert digest == rep["mask_file_digest"], f"{mask.name} changed after it was simulated"
        m = rep["metrics"]
        assert m["l2_nm2"] >= 0 and m["pvb_nm2"] >= 0 and m["epe_violations"] >= 0


def test_layouts_are_on_the_mask_layer():
    for p in sorted((ROOT / "layouts").glob("*.oas")):
        assert p.read_bytes()[:13] == b"%SEMI-OASIS\\r\\n", p.name
'''

README = """# ICCAD 2013 M1 clips: inverse lithography masks

Targets in `layouts/` (ICCAD 2013 contest, 1 nm grid, layer 1/0). Masks are
produced by inverse lithography against the pinned SOCS kernels in
`kernels/iccad13/` and land in `masks/` only through dome, with a signed
evidence chain: each mask is re-simulated on the integration head (its
claimed L2 and PVB must reproduce exactly) and checked with the mask-rule
deck in `rules/`.

Data: ICCAD 2013 test layouts and kernels as redistributed by OpenILT (MIT),
see LICENSES/.
"""


def git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "dome example", "GIT_AUTHOR_EMAIL": "example@dome.invalid",
           "GIT_COMMITTER_NAME": "dome example", "GIT_COMMITTER_EMAIL": "example@dome.invalid",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
    subprocess.run(["git", *args], cwd=repo, check=True, env=env, capture_output=True)


def default_data() -> Path:
    """The data folder: $DOME_ICCAD13_DATA, else the copy shipped beside this script."""
    return iccad13_data() or HERE / "data"


def write_oasis(glp: Path, out: Path) -> None:
    import klayout.db as kdb

    from worker_sdk.litho.layout import parse_glp

    layout = parse_glp(glp.read_text(), str(glp))
    ly = kdb.Layout()
    ly.dbu = 0.001  # 1 nm
    top = ly.create_cell(glp.stem)
    li = ly.layer(1, 0)
    for poly in layout.polygons:
        top.shapes(li).insert(kdb.Polygon([kdb.Point(x, y) for x, y in poly]))
    opts = kdb.SaveLayoutOptions()
    opts.format = "OASIS"
    ly.write(str(out), opts)


def make_repo(out: Path, data: Path, *, force: bool = False) -> Path:
    if out.exists():
        if not force:
            raise SystemExit(f"{out} exists; pass --force to recreate it")
        shutil.rmtree(out)
    (out / "layouts").mkdir(parents=True)
    for n in range(1, 11):
        write_oasis(data / "layouts" / f"M1_test{n}.glp", out / "layouts" / f"M1_test{n}.oas")
    kdir = out / "kernels" / "iccad13" / "kernels_bin"
    for corner in ("focus", "defocus"):
        shutil.copytree(data / "kernels_bin" / corner, kdir / corner)
    shutil.copytree(data / "licenses", out / "LICENSES")
    (out / "rules").mkdir()
    (out / "rules" / "mask_rules.drc").write_text(RUBY_DECK)
    (out / "rules" / "mask_rules.py").write_text(PY_DECK)
    (out / "tests").mkdir()
    (out / "tests" / "test_repository.py").write_text(REPO_TESTS)
    (out / "README.md").write_text(README)
    (out / ".gitattributes").write_text("*.oas binary\n*.png binary\n*.bin binary\n")
    git(out, "init", "-q", "-b", "main")
    git(out, "add", "-A")
    git(out, "commit", "-q", "-m", "ICCAD 2013 targets, kernels and mask rules")
    return out


QUICK_CLIPS = (1, 4)
QUICK_ITERATIONS = 40


def work_queue(clips: tuple[int, ...], iterations: int | None, *, name: str,
               promote_to: str = "refs/heads/masks") -> dict:
    """One litho.optimize task per clip, a DRC task per mask after it, and the
    validations that gate promotion: re-simulation, the mask rules, the repo's tests."""
    tasks = []
    for n in clips:
        params = {"layout": f"layouts/M1_test{n}.oas", "out": f"masks/M1_test{n}.oas",
                  "kernels": "kernels/iccad13", "fill": "lithobench", "preset": "mrc-quality",
                  "mrc": {"min_feature_nm": mask_rules.MIN_WIDTH_NM, "min_area_nm2": mask_rules.MIN_AREA_NM2}}
        if iterations:
            params["iterations"] = iterations
        tasks.append({"node_id": f"optimize-t{n}", "description": f"ILT mask for ICCAD 2013 clip {n}",
                      "required_capabilities": ["write"], "required_outputs": ["patch_proposal", "evidence:litho"],
                      "containers": [], "dependencies": [], "risk": "low", "timeout_s": 1800,
                      "action_spec": {"intent": "litho.optimize", "params": params}})
        tasks.append({"node_id": f"drc-t{n}", "description": f"mask rules on the clip {n} mask (Ruby deck)",
                      "required_capabilities": ["read"], "required_outputs": ["evidence:drc"], "containers": [],
                      "dependencies": [f"optimize-t{n}"], "timeout_s": 600,
                      "action_spec": {"intent": "drc.run", "params": {
                          "deck": "rules/mask_rules.drc", "script_type": "ruby", "layout": f"masks/M1_test{n}.oas"}}})
    return {
        "artifact_kind": "dome.work.queue/v1",
        "name": name,
        "description": "Inverse lithography masks for the ICCAD 2013 M1 clips, checked and promoted with evidence.",
        "repo": "repo",
        "base_ref": "main",
        "determinism_seed": 2013,
        "policy": "default",
        "promote_to": promote_to,
        "scheduling": {"max_parallel": 2, "endgame_max_duplicates": 0, "default_max_attempts": 2},
        "tasks": tasks,
        "validations": [
            {"suite": "litho.resim", "name": "litho_resim", "params": {"kernels": "kernels/iccad13"},
             "required": True, "timeout_s": 1800},
            {"suite": "drc", "name": "mask_rules", "required": True, "timeout_s": 900,
             "params": {"deck": "rules/mask_rules.py", "script_type": "python",
                        "layouts": ["masks/*.oas"]}},
            {"suite": "command", "name": "tests", "argv": ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
             "required": True, "timeout_s": 600},
        ],
    }


def write_queues(directory: Path = HERE) -> list[Path]:
    import json

    out = []
    # the quick job and the full job promote to different branches, so running
    # one after the other never finds its target moved by the other
    for fname, clips, iters, name, target in (
            ("work.queue.json", tuple(range(1, 11)), None, "iccad13-ilt", "refs/heads/masks"),
            ("work.quick.json", QUICK_CLIPS, QUICK_ITERATIONS, "iccad13-ilt-quick", "refs/heads/masks-quick")):
        path = directory / fname
        path.write_text(json.dumps(work_queue(clips, iters, name=name, promote_to=target), indent=2) + "\n")
        out.append(path)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "repo")
    ap.add_argument("--data", type=Path, default=None, help="the ICCAD 2013 data folder (SOURCE.md beside it)")
    ap.add_argument("--force", action="store_true", help="recreate the repository if it exists")
    ap.add_argument("--write-queues", action="store_true",
                    help="(maintainers) regenerate work.queue.json and work.quick.json beside this script")
    args = ap.parse_args(argv)
    if args.write_queues:
        for p in write_queues():
            print(p)
        return 0
    data = args.data or default_data()
    if not (data / "layouts" / "M1_test1.glp").is_file():
        print(f"make_repo: no ICCAD 2013 data at {data}; pass --data or set DOME_ICCAD13_DATA", file=sys.stderr)
        return 2
    repo = make_repo(args.out.resolve(), data, force=args.force)
    print(repo)
    return 0


if __name__ == "__main__":
    sys.exit(main())
