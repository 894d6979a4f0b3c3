"""Real GDS and OASIS fixtures built with klayout.db (no checked-in binaries).

Hierarchy with arrays and rotated/mirrored instances, paths, texts, several
top cells (AUX sorts before TOP), photonic waveguides with a circular bend,
and metal features that break min width / space / area rules on purpose.
"""
from __future__ import annotations

import math
from pathlib import Path

import klayout.db as kdb

WG = (1, 0)
METAL = (2, 0)
TEXT = (10, 0)
SLAB = (3, 0)
DBU = 0.001


def arc_points(cx: float, cy: float, r: float, a0: float, a1: float, n: int) -> list[kdb.Point]:
    pts = []
    for i in range(n + 1):
        a = math.radians(a0 + (a1 - a0) * i / n)
        pts.append(kdb.Point(round((cx + r * math.cos(a)) / DBU), round((cy + r * math.sin(a)) / DBU)))
    return pts


def um(v: float) -> int:
    return round(v / DBU)


def build_layout(named_layers: bool = False) -> kdb.Layout:
    ly = kdb.Layout()
    ly.dbu = DBU
    def L(ld, name):  # noqa: E306
        return ly.layer(kdb.LayerInfo(ld[0], ld[1], name) if named_layers else kdb.LayerInfo(ld[0], ld[1]))
    wg, metal, text, slab = L(WG, "WG"), L(METAL, "METAL"), L(TEXT, "TEXT"), L(SLAB, "SLAB")

    pad = ly.create_cell("PAD")
    pad.shapes(metal).insert(kdb.Box(0, 0, um(5), um(5)))
    pad.shapes(text).insert(kdb.Text("P", kdb.Trans(um(2.5), um(2.5))))

    mmi = ly.create_cell("MMI")
    mmi.shapes(wg).insert(kdb.Box(0, um(-2), um(20), um(2)))
    mmi.shapes(wg).insert(kdb.Path([kdb.Point(um(-5), 0), kdb.Point(0, 0)], um(0.5)))
    mmi.shapes(wg).insert(kdb.Path([kdb.Point(um(20), um(1)), kdb.Point(um(25), um(1))], um(0.5)))
    mmi.shapes(wg).insert(kdb.Path([kdb.Point(um(20), um(-1)), kdb.Point(um(25), um(-1))], um(0.5)))
    mmi.shapes(slab).insert(kdb.Polygon([kdb.Point(0, um(-3)), kdb.Point(um(20), um(-3)), kdb.Point(um(20), um(3)),
                                         kdb.Point(um(10), um(4)), kdb.Point(0, um(3))]))

    top = ly.create_cell("TOP")
    top.insert(kdb.CellInstArray(mmi.cell_index(), kdb.Trans(um(100), um(50))))
    top.insert(kdb.CellInstArray(mmi.cell_index(), kdb.Trans(kdb.Trans.R90, kdb.Vector(um(200), um(50)))))
    top.insert(kdb.CellInstArray(mmi.cell_index(), kdb.Trans(kdb.Trans.M0, kdb.Vector(um(100), um(150)))))
    top.insert(kdb.CellInstArray(pad.cell_index(), kdb.Trans(um(300), 0), kdb.Vector(um(10), 0),
                                 kdb.Vector(0, um(10)), 3, 2))
    # straight waveguide, then a waveguide with a 10 um radius 90 degree circular bend
    top.shapes(wg).insert(kdb.Path([kdb.Point(0, 0), kdb.Point(um(40), 0)], um(0.5)))
    bend = [kdb.Point(0, um(20))] + arc_points(30.0, 30.0, 10.0, -90.0, 0.0, 32) + [kdb.Point(um(40), um(60))]
    top.shapes(wg).insert(kdb.Path(bend, um(0.5)))
    top.shapes(wg).insert(kdb.Path([kdb.Point(0, um(1)), kdb.Point(um(40), um(1))], um(0.5)))  # 0.5 um gap
    top.shapes(text).insert(kdb.Text("IN", kdb.Trans(0, 0)))
    top.shapes(text).insert(kdb.Text("OUT", kdb.Trans(um(40), 0)))
    # metal rule violations: 0.1 um wide line, two boxes 0.1 um apart, a 0.04 um^2 dot
    top.shapes(metal).insert(kdb.Box(um(500), 0, um(500.1), um(10)))
    top.shapes(metal).insert(kdb.Box(um(510), 0, um(515), um(5)))
    top.shapes(metal).insert(kdb.Box(um(515.1), 0, um(520), um(5)))
    top.shapes(metal).insert(kdb.Box(um(530), 0, um(530.2), um(0.2)))

    aux = ly.create_cell("AUX")
    aux.shapes(metal).insert(kdb.Box(0, 0, um(1), um(1)))
    return ly


def write_fixtures(directory: Path) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    gds = directory / "chip.gds"
    oas = directory / "chip.oas"
    build_layout(False).write(str(gds))
    build_layout(True).write(str(oas))
    return {"gds": gds, "oas": oas}


def big_layout(path: Path, n_side: int = 1000) -> Path:
    """n_side^2 boxes on 1/0 in one flat cell (1 million for 1000), for benchmarks."""
    ly = kdb.Layout()
    ly.dbu = DBU
    top = ly.create_cell("TOP")
    li = ly.layer(1, 0)
    shapes = top.shapes(li)
    for i in range(n_side):
        for j in range(n_side):
            shapes.insert(kdb.Box(i * 2000, j * 2000, i * 2000 + 1000, j * 2000 + 1000))
    ly.write(str(path))
    return path
