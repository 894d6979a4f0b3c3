"""Layouts: .glp parsing, GDS/OASIS reading through klayout.db, rasterization, mask export.

Geometry is kept as integer rectilinear polygons in layout nanometres
(1 unit = 1 nm). Rasterization puts them on a canvas of `size` x `size`
pixels of 1 nm, indexed [row = y, col = x], with one of two fill conventions:

- ``exact``: pixel (y, x) covers [x, x+1) x [y, y+1) and is set when that
  cell lies inside a polygon. The pixel count equals the exact area.
- ``lithobench``: what ``cv2.fillPoly`` does on integer vertices (LithoBench,
  OpenILT): every integer point inside *or on* a polygon is set, i.e. the right
  and top boundary pixels too. For rectilinear polygons with integer vertices
  this is the exact fill of P (+) [0,1]^2, computed here as the OR of the exact
  fill shifted by (0,0), (1,0), (0,1) and (1,1).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from .errors import LayoutFormatError

FILLS: tuple[str, ...] = ("lithobench", "exact")
CANVAS = 2048
A2ILT_ORIGIN = 547  # exact-area PNGs of A2-ILT / Neural-ILT put the bbox minimum here

Point = tuple[int, int]


@dataclass(frozen=True)
class Layout:
    """Rectilinear polygons in nm, plus where they came from."""

    polygons: tuple[tuple[Point, ...], ...]
    source: str = ""
    layer: str = ""
    meta: dict = field(default_factory=dict, compare=False)

    def bbox(self) -> tuple[int, int, int, int]:
        if not self.polygons:
            raise LayoutFormatError("layout has no shapes", details={"source": self.source})
        xs = [x for p in self.polygons for x, _ in p]
        ys = [y for p in self.polygons for _, y in p]
        return min(xs), min(ys), max(xs), max(ys)

    def area(self) -> int:
        return sum(abs(_shoelace(p)) for p in self.polygons) // 2

    def digest(self) -> str:
        h = hashlib.sha256()
        for p in sorted(self.polygons):
            h.update(repr(p).encode())
        return "sha256:" + h.hexdigest()

    def translated(self, dx: int, dy: int) -> "Layout":
        return Layout(tuple(tuple((x + dx, y + dy) for x, y in p) for p in self.polygons), self.source, self.layer, self.meta)


def _shoelace(p: Sequence[Point]) -> int:
    s = 0
    n = len(p)
    for i in range(n):
        x0, y0 = p[i]
        x1, y1 = p[(i + 1) % n]
        s += x0 * y1 - x1 * y0
    return s


_NUM = re.compile(r"-?\d+")


def parse_glp(text: str, source: str = "", layer: str | None = None) -> Layout:
    """Parse a .glp file: RECT and PGON lines matter, everything else is metadata."""
    polys: list[tuple[Point, ...]] = []
    layers: set[str] = set()
    for lineno, raw in enumerate(text.splitlines(), 1):
        toks = raw.split()
        if not toks or toks[0] not in ("RECT", "PGON"):
            continue
        if len(toks) < 3:
            raise LayoutFormatError("truncated shape line", details={"line": lineno, "source": source})
        lay = toks[2]
        if layer is not None and lay != layer:
            continue
        try:
            nums = [int(t) for t in toks[3:]]
        except ValueError as exc:
            raise LayoutFormatError("non-integer coordinate", details={"line": lineno, "source": source}) from exc
        if toks[0] == "RECT":
            if len(nums) != 4:
                raise LayoutFormatError("RECT needs x y w h", details={"line": lineno, "source": source})
            x, y, w, h = nums
            if w <= 0 or h <= 0:
                raise LayoutFormatError("RECT with non-positive size", details={"line": lineno, "source": source})
            polys.append(((x, y), (x + w, y), (x + w, y + h), (x, y + h)))
        else:
            if len(nums) < 8 or len(nums) % 2:
                raise LayoutFormatError("PGON needs at least 4 vertices", details={"line": lineno, "source": source})
            pts = tuple((nums[i], nums[i + 1]) for i in range(0, len(nums), 2))
            for i in range(len(pts)):
                a, b = pts[i], pts[(i + 1) % len(pts)]
                if a[0] != b[0] and a[1] != b[1]:
                    raise LayoutFormatError("PGON is not rectilinear", details={"line": lineno, "source": source})
            polys.append(pts)
        layers.add(lay)
    if not polys:
        raise LayoutFormatError("no RECT/PGON shapes found", details={"source": source, "layer": layer})
    return Layout(tuple(polys), source, layer or ",".join(sorted(layers)))


def _parse_layer_spec(spec: str | None) -> tuple[int, int] | None:
    if spec is None or spec == "":
        return None
    m = re.fullmatch(r"(\d+)(?:/(\d+))?", spec.strip())
    if not m:
        raise LayoutFormatError(f"layer must be L or L/D, got {spec!r}")
    return int(m.group(1)), int(m.group(2) or 0)


def read_klayout(path: Path, layer: str | None = None, cell: str | None = None) -> Layout:
    """Read GDS/OASIS through klayout.db; all polygons of one layer in the top cell (flattened), in nm."""
    import klayout.db as kdb

    ly = kdb.Layout()
    try:
        ly.read(str(path))
    except Exception as exc:  # klayout raises RuntimeError with its own text
        raise LayoutFormatError(f"cannot read layout: {exc}", details={"path": str(path)}) from exc
    want = _parse_layer_spec(layer)
    infos = [(ly.get_info(i), i) for i in ly.layer_indexes()]
    if want is None:
        nonempty = [(inf, i) for inf, i in infos if not ly.top_cells() or any(not c.shapes(i).is_empty() for c in ly.each_cell())]
        if len(nonempty) != 1:
            raise LayoutFormatError("layout has several layers; choose one with --layer L/D",
                                    details={"layers": [f"{inf.layer}/{inf.datatype}" for inf, _ in nonempty]})
        info, li = nonempty[0]
    else:
        match = [(inf, i) for inf, i in infos if (inf.layer, inf.datatype) == want]
        if not match:
            raise LayoutFormatError(f"layer {layer} not in layout",
                                    details={"layers": [f"{inf.layer}/{inf.datatype}" for inf, _ in infos]})
        info, li = match[0]
    tops = ly.top_cells()
    if cell:
        top = ly.cell(cell)
        if top is None:
            raise LayoutFormatError(f"no cell {cell!r}")
    elif len(tops) == 1:
        top = tops[0]
    else:
        raise LayoutFormatError("layout has several top cells; choose one", details={"cells": [c.name for c in tops]})
    region = kdb.Region(top.begin_shapes_rec(li))
    region.merge()
    scale = ly.dbu * 1000.0  # database units -> nm
    polys: list[tuple[Point, ...]] = []
    for poly in region.each():
        if poly.holes():
            for piece in kdb.Region(poly).decompose_convex():  # rectilinear pieces without holes
                polys.append(_kpoly_points(piece, scale))
        else:
            polys.append(_kpoly_points(poly, scale))
    if not polys:
        raise LayoutFormatError("selected layer is empty", details={"path": str(path), "layer": f"{info.layer}/{info.datatype}"})
    return Layout(tuple(polys), str(path), f"{info.layer}/{info.datatype}")


def _kpoly_points(poly, scale: float) -> tuple[Point, ...]:
    pts = []
    for pt in poly.each_point_hull():
        x, y = pt.x * scale, pt.y * scale
        if abs(x - round(x)) > 1e-6 or abs(y - round(y)) > 1e-6:
            raise LayoutFormatError("vertex off the 1 nm grid", details={"x": x, "y": y})
        pts.append((int(round(x)), int(round(y))))
    return tuple(pts)


def load_layout(path: Path | str, layer: str | None = None) -> Layout:
    path = Path(path)
    if not path.is_file():
        raise LayoutFormatError(f"no such layout file: {path}", details={"path": str(path)})
    suffix = path.suffix.lower()
    if suffix == ".glp":
        return parse_glp(path.read_text(), str(path), layer)
    if suffix in (".gds", ".gds2", ".gdsii", ".oas", ".oasis"):
        return read_klayout(path, layer)
    raise LayoutFormatError(f"unknown layout format {suffix!r}", hints=["use .glp, .gds or .oas"])


def placement(layout: Layout, fill: str, size: int = CANVAS) -> tuple[int, int]:
    """Canvas shift (dx, dy) in pixels: lithobench centres the bbox, exact puts its minimum at 547."""
    x0, y0, x1, y1 = layout.bbox()
    if fill == "lithobench":
        return (size - (x1 - x0)) // 2 - x0, (size - (y1 - y0)) // 2 - y0
    if fill == "exact":
        if size == CANVAS:
            return A2ILT_ORIGIN - x0, A2ILT_ORIGIN - y0
        return (size - (x1 - x0)) // 2 - x0, (size - (y1 - y0)) // 2 - y0
    raise LayoutFormatError(f"unknown fill convention {fill!r}", hints=["use lithobench or exact"])


def rasterize_exact(polygons: Iterable[Sequence[Point]], shape: tuple[int, int], offset: tuple[int, int] = (0, 0)) -> np.ndarray:
    """Cell-exact fill (nonzero winding) of integer rectilinear polygons; offset is added to vertices."""
    h, w = shape
    dx, dy = offset
    diff = np.zeros((h + 1, w + 2), dtype=np.int32)
    for poly in polygons:
        n = len(poly)
        for i in range(n):
            xa, ya = poly[i]
            xb, yb = poly[(i + 1) % n]
            if xa != xb:
                continue
            x = min(max(xa + dx, 0), w + 1)
            y0, y1 = ya + dy, yb + dy
            sign = 1 if y1 > y0 else -1
            lo, hi = (y0, y1) if y0 < y1 else (y1, y0)
            lo, hi = max(lo, 0), min(hi, h)
            if lo < hi:
                diff[lo:hi, x] += sign
    wind = np.cumsum(diff[:h, : w + 1], axis=1)[:, :w]
    return (wind != 0).astype(np.uint8)


def rasterize(layout: Layout, fill: str = "lithobench", size: int = CANVAS,
              shift: tuple[int, int] | None = None) -> np.ndarray:
    """uint8 [size, size] image of the layout under a fill convention; shift defaults to placement()."""
    if fill not in FILLS:
        raise LayoutFormatError(f"unknown fill convention {fill!r}", hints=["use lithobench or exact"])
    dx, dy = placement(layout, fill, size) if shift is None else shift
    img = rasterize_exact(layout.polygons, (size, size), (dx, dy))
    if fill == "lithobench":
        out = img.copy()
        out[:, 1:] |= img[:, :-1]
        out[1:, :] |= img[:-1, :]
        out[1:, 1:] |= img[:-1, :-1]
        img = out
    return img


def load_mask_png(path: Path | str, size: int = CANVAS) -> np.ndarray:
    """A grayscale PNG mask -> uint8 {0,1} (threshold 127). Rows are canvas y."""
    from PIL import Image

    from .errors import MaskFormatError

    try:
        with Image.open(path) as im:
            arr = np.asarray(im.convert("L"))
    except Exception as exc:
        raise MaskFormatError(f"cannot read mask image: {exc}", details={"path": str(path)}) from exc
    if arr.shape != (size, size):
        raise MaskFormatError(f"mask must be {size}x{size}", details={"shape": list(arr.shape)})
    return (arr > 127).astype(np.uint8)


def save_mask_png(mask: np.ndarray, path: Path | str) -> None:
    from PIL import Image

    Image.fromarray((np.asarray(mask) > 0).astype(np.uint8) * 255).save(str(path), optimize=True)


def raster_to_region(mask: np.ndarray, shift: tuple[int, int] = (0, 0)):
    """Binary raster -> merged klayout.db Region in layout nm (pixel (y,x) = cell [x,x+1)x[y,y+1) minus shift)."""
    import klayout.db as kdb

    m = np.asarray(mask) > 0
    dx, dy = shift
    region = kdb.Region()
    # run-length encode rows; merge vertically by klayout
    for y in np.nonzero(m.any(axis=1))[0]:
        row = m[y].astype(np.int8)
        edges = np.diff(np.concatenate(([0], row, [0])))
        starts = np.nonzero(edges == 1)[0]
        ends = np.nonzero(edges == -1)[0]
        for s, e in zip(starts, ends):
            region.insert(kdb.Box(int(s) - dx, int(y) - dy, int(e) - dx, int(y) + 1 - dy))
    region.merge()
    return region


def write_mask_layout(mask: np.ndarray, path: Path | str, shift: tuple[int, int] = (0, 0),
                      layer: tuple[int, int] = (1, 0), cell: str = "MASK") -> int:
    """Write a binary raster as polygons (OASIS for .oas, GDS for .gds). Returns the polygon count."""
    import klayout.db as kdb

    path = Path(path)
    if path.suffix.lower() not in (".oas", ".gds"):
        raise LayoutFormatError("mask geometry goes to .oas or .gds", details={"path": str(path)})
    ly = kdb.Layout()
    ly.dbu = 0.001  # 1 nm
    top = ly.create_cell(cell)
    li = ly.layer(kdb.LayerInfo(*layer))
    region = raster_to_region(mask, shift)
    top.shapes(li).insert(region)
    opts = kdb.SaveLayoutOptions()
    opts.format = "OASIS" if path.suffix.lower() == ".oas" else "GDS2"
    ly.write(str(path), opts)
    return region.count()


