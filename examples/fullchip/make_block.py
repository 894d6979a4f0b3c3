#!/usr/bin/env python3
"""Build the fullchip example's layouts from the IHP SG13G2 cells that ihp-gdsfactory ships.

    pip download --no-deps ihp-gdsfactory==2.0.0 -d /tmp/ihp && unzip -q /tmp/ihp/*.whl -d /tmp/ihp/x
    python examples/fullchip/make_block.py --cells /tmp/ihp/x/ihp/gds

Writes (all on layer 1/0, 1 nm database unit):

    layouts/block.oas        the full block (>= 20 um x 20 um after scaling)
    layouts/block_quick.oas  a 3 um x 3 um crop of it (16 tiles), the CI variant

What is done to the data (nothing else):
1. Metal1 (GDS layer 8/0) of each cell listed in CELLS is read and merged.
2. It is scaled by SCALE = 0.4 about the cell's origin and snapped to 1 nm.
   SG13G2's minimum Metal1 width is 160 nm and its minimum space 180 nm;
   times 0.4 they become 64 nm and 72 nm, the size of the narrowest lines and
   gaps of the ICCAD 2013 M1 clips (58-82 nm wide, 54-154 nm apart), which
   the SOCS kernels are made for.
3. The scaled cells are placed left to right in rows, GAP nm apart (at least
   the scaled minimum space), cycling through CELLS until the block is full.
"""
from __future__ import annotations

import argparse
from pathlib import Path

HERE = Path(__file__).resolve().parent

SCALE = 0.4
GAP = 200  # nm between placed cells (after scaling)
BLOCK = 20_480  # nm: the block is at least this wide and tall
QUICK = (6_000, 6_000, 9_000, 9_000)  # crop window of the quick variant (nm, block frame)
# device cells with fine Metal1 structure (large pads, seal rings and ESD blocks are left out)
CELLS = ("rfnmos", "rfpmos", "npn13G2", "nmos", "pmos", "npn13G2L", "rhigh", "rppd", "rsil", "schottky_nbl1",
         "nmosHV", "pmosHV", "npn13G2V", "ntap1", "ptap1", "pnpMPA", "rfnmosHV", "rfpmosHV", "SVaricap")
METAL1 = (8, 0)


def scaled_metal1(path: Path):
    import klayout.db as kdb

    ly = kdb.Layout()
    ly.read(str(path))
    li = ly.find_layer(*METAL1)
    region = kdb.Region(ly.top_cell().begin_shapes_rec(li)) if li is not None else kdb.Region()
    region.merge()
    # database units -> nm, times SCALE, snapped to the 1 nm grid
    region = region.transformed(kdb.ICplxTrans(ly.dbu * 1000 * SCALE))
    region.merge()
    return region


def build(cells_dir: Path):
    import klayout.db as kdb

    shapes = {}
    for name in CELLS:
        r = scaled_metal1(cells_dir / f"{name}.gds")
        if not r.is_empty():
            b = r.bbox()
            shapes[name] = r.moved(-b.left, -b.bottom)
    block = kdb.Region()
    x = y = 0
    row_h = 0
    k = 0
    placed = []
    while y < BLOCK:
        name = CELLS[k % len(CELLS)]
        k += 1
        if name not in shapes:
            continue
        r = shapes[name]
        b = r.bbox()
        if x + b.width() > BLOCK and x > 0:
            x, y = 0, y + row_h + GAP
            row_h = 0
            if y >= BLOCK:
                break
        block.insert(r.moved(x, y))
        placed.append(name)
        x += b.width() + GAP
        row_h = max(row_h, b.height())
    block.merge()
    return block, placed


def write(region, path: Path) -> None:
    import klayout.db as kdb

    ly = kdb.Layout()
    ly.dbu = 0.001
    top = ly.create_cell("BLOCK")
    top.shapes(ly.layer(kdb.LayerInfo(1, 0))).insert(region)
    path.parent.mkdir(parents=True, exist_ok=True)
    ly.write(str(path))


def main() -> int:
    import klayout.db as kdb

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=Path, required=True, help="the ihp/gds folder of the ihp-gdsfactory wheel")
    ap.add_argument("--out", type=Path, default=HERE / "layouts")
    args = ap.parse_args()
    block, placed = build(args.cells)
    write(block, args.out / "block.oas")
    crop = block & kdb.Region(kdb.Box(*QUICK))
    write(crop, args.out / "block_quick.oas")
    b = block.bbox()
    print(f"block: {b.width()} x {b.height()} nm, {block.count()} polygons, {len(placed)} cells placed; "
          f"quick: {crop.count()} polygons")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
