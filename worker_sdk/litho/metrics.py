"""L2, PVB, EPE and print topology, each as a number and as per-location records (canvas px = nm).

- L2  = #pixels where the nominal print differs from the target (nm^2).
- PVB = #pixels printed at some process corner but not at all of them (for the
  ICCAD 2013 pair: max xor min).
- EPE follows LithoBench's checker, sample for sample (see `epe_samples`).
- Topology compares connected components (4-connected) of each corner's print
  with those of the target: bridges, opens, extra and missing shapes.

Everything works on rasters: the EPE rule samples the rasterized target, so
it describes exactly the pixels the simulator was given.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from .layout import raster_to_region

EPE_CONSTRAINT_NM = 15
EPE_SPACING_NM = 40  # between samples, and from a segment's ends to its first samples
EPE_SHORT_NM = 80  # segments this long or shorter get one sample, at their centre


@dataclass(frozen=True)
class EdgeSample:
    x: float  # canvas nm: the edge pixel's column (vertical edge) or sample column (horizontal)
    y: float
    normal: tuple[int, int]  # unit vector pointing out of the shape
    inside_px: tuple[int, int]  # (row, col) that must print
    outside_px: tuple[int, int]  # (row, col) that must not print


def boundary_pixels(target: np.ndarray) -> np.ndarray:
    """Target pixels with at least one of their 8 neighbours unset (outside the canvas counts as unset)."""
    t = np.asarray(target).astype(bool)
    p = np.pad(t, 1)
    h, w = t.shape
    full = t.copy()
    for dy in (0, 1, 2):
        for dx in (0, 1, 2):
            full &= p[dy:dy + h, dx:dx + w]
    return t & ~full


def _segments(sites: np.ndarray, along: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Runs of `sites` ([K, 2] (row, col), already in scan order) whose `along` coordinate steps by one.

    Like LithoBench, only the step along the edge is checked: the last pixel of one
    column and the first of the next join when their rows are consecutive.
    """
    if not len(sites):
        return []
    a = sites[:, along]
    brk = np.flatnonzero(a[1:] != a[:-1] + 1) + 1
    starts = np.concatenate(([0], brk))
    ends = np.concatenate((brk - 1, [len(sites) - 1]))
    return [(sites[s], sites[e]) for s, e in zip(starts, ends)]


def _positions(lo: int, hi: int, centre: int) -> list[int]:
    """Sample coordinates along a segment [lo, hi] longer than EPE_SHORT_NM: every EPE_SPACING_NM
    from each end towards the centre (the lower run may reach the centre, the upper stops short)."""
    first = range(lo + EPE_SPACING_NM, centre + 1, EPE_SPACING_NM)
    second = range(hi - EPE_SPACING_NM, centre, -EPE_SPACING_NM)
    return sorted(set(first) | set(second))


def epe_samples(target: np.ndarray) -> list[EdgeSample]:
    """LithoBench's EPE sample points on a rasterized target.

    Edge pixels are the target's boundary pixels; vertical-edge pixels are those
    not flanked left *and* right by boundary pixels (horizontal: above and below).
    Each run of them (scanned column by column, resp. row by row) is one segment
    from its first pixel s to its last e, centre c = floor((s + e) / 2) per
    coordinate. If e - s <= 80 it is sampled once at c; else at s+40, s+80, ...
    up to c and e-40, e-80, ... down to just above c (duplicates dropped), in
    the column (row) of s. The side is read at the segment's first sample: the
    shape lies on the side where the target is set. The inside probe is 15 px
    from the edge pixel into the shape (the 16th pixel inside, the edge pixel
    being the first), the outside probe 15 px the other way (the 15th pixel
    outside). A segment whose side is ambiguous (a 1 px wide feature) is not
    sampled. Probes outside the canvas drop the sample.
    """
    t = np.asarray(target).astype(bool)
    h, w = t.shape
    b = boundary_pixels(t)
    p = np.pad(b, 1)
    vertical = b & ~(p[1:-1, :-2] & p[1:-1, 2:])
    horizontal = b & ~(p[:-2, 1:-1] & p[2:, 1:-1])

    def at(r: int, c: int) -> bool:
        return 0 <= r < h and 0 <= c < w and bool(t[r, c])

    out: list[EdgeSample] = []
    cols, rows = np.nonzero(vertical.T)  # column-major scan: by column, then row
    out += _sample_edges(np.stack([rows, cols], 1), 0, at)
    rows, cols = np.nonzero(horizontal)  # row-major scan: by row, then column
    out += _sample_edges(np.stack([rows, cols], 1), 1, at)
    inside = [s for s in out if all(0 <= v < lim for v, lim in zip((*s.inside_px, *s.outside_px), (h, w, h, w)))]
    return inside


def _sample_edges(sites: np.ndarray, along: int, at) -> list[EdgeSample]:
    """Samples of the edge segments in `sites` ([K, 2] (row, col) in scan order); `along` is the
    axis the edges run along (0: vertical edges, 1: horizontal), `at(r, c)` reads the target."""
    across = 1 - along
    d = EPE_CONSTRAINT_NM
    out: list[EdgeSample] = []
    for s, e in _segments(sites, along):
        centre = ((int(s[0]) + int(e[0])) // 2, (int(s[1]) + int(e[1])) // 2)
        if e[along] - s[along] <= EPE_SHORT_NM:
            pts = [centre]
        else:
            pts = []
            for v in _positions(int(s[along]), int(e[along]), centre[along]):
                p = [0, 0]
                p[along], p[across] = v, int(s[across])
                pts.append((p[0], p[1]))
        step = (1, 0) if across == 0 else (0, 1)  # one pixel across the edge
        r0, c0 = pts[0]
        if at(r0 + step[0], c0 + step[1]) and not at(r0 - step[0], c0 - step[1]):
            sgn = -1  # the shape lies on the + side: the edge faces -
        elif at(r0 - step[0], c0 - step[1]) and not at(r0 + step[0], c0 + step[1]):
            sgn = 1
        else:
            continue  # no side (a 1 px wide feature): not sampled
        normal = (sgn * step[1], sgn * step[0])  # (x, y)
        for r, c in pts:
            out.append(EdgeSample(float(c), float(r), normal, (r - sgn * d * step[0], c - sgn * d * step[1]),
                                  (r + sgn * d * step[0], c + sgn * d * step[1])))
    return out


def epe_check(samples: list[EdgeSample], nominal: np.ndarray) -> list[dict[str, Any]]:
    """One record per failed probe: 'inner' (the inside probe did not print), 'outer' (the outside
    probe printed). A sample can fail both; like LithoBench, the EPE count is inner + outer."""
    out = []
    for s in samples:
        if not nominal[s.inside_px]:
            out.append({"x": s.x, "y": s.y, "normal": list(s.normal), "kind": "inner"})
        if nominal[s.outside_px]:
            out.append({"x": s.x, "y": s.y, "normal": list(s.normal), "kind": "outer"})
    return out


EPE_SEARCH_NM = 64  # how far along the normal the printed edge is looked for


def epe_distances(samples: list[EdgeSample], nominal: np.ndarray, search: int = EPE_SEARCH_NM) -> np.ndarray:
    """Signed edge placement error at each sample, in nm (pixels): how far the printed edge lies
    outward (+) or inward (-) of the target edge along the sample's normal, capped at +-search.

    The target edge lies just outside the edge pixel. If the edge pixel prints, the print's edge is
    after its last printed pixel walking outward (d = printed pixels beyond the edge pixel); if not,
    it is before the first printed pixel walking inward (d = -(pixels not printed, edge pixel
    included)). A richer measure than the pass/fail count of `epe_check`, reported separately."""
    h, w = nominal.shape

    def printed(r: int, c: int) -> bool:
        return 0 <= r < h and 0 <= c < w and bool(nominal[r, c])

    out = np.zeros(len(samples), dtype=np.int64)
    for i, s in enumerate(samples):
        nx, ny = s.normal
        # the edge pixel: the inside probe moved back to the edge along the normal
        r0, c0 = s.inside_px[0] + ny * EPE_CONSTRAINT_NM, s.inside_px[1] + nx * EPE_CONSTRAINT_NM
        if printed(r0, c0):
            k = 0
            while k < search and printed(r0 + ny * (k + 1), c0 + nx * (k + 1)):
                k += 1
            out[i] = k
        else:
            m = 1
            while m < search and not printed(r0 - ny * m, c0 - nx * m):
                m += 1
            out[i] = -m
    return out


# ----- connected components --------------------------------------------------------------------

@dataclass(frozen=True)
class Labelled:
    """Connected components of a binary image: labels (0 = background, 1..n), and per label
    (row 0 unused) the box [x0, y0, x1, y1) and the area, both taken from the runs."""
    labels: np.ndarray
    n: int
    bbox: np.ndarray  # [n+1, 4] int64
    area: np.ndarray  # [n+1] int64


def label_components(binary: np.ndarray, diagonal: bool = False) -> Labelled:
    """4-connected components (8-connected with `diagonal`, as KLayout merges a raster's
    pixels), numbered in scan order of each component's first run.

    Runs of set pixels per row are the nodes; runs in adjacent rows whose columns overlap
    are joined (vectorised union-find: hook roots to the smaller root, then pointer jumping).
    Memory: the int32 label image plus about 2 bytes per pixel while runs are found.
    """
    img = np.asarray(binary).astype(bool)
    h, w = img.shape
    labels = np.zeros((h, w), dtype=np.int32)
    if not img.any():
        return Labelled(labels, 0, np.zeros((1, 4), dtype=np.int64), np.zeros(1, dtype=np.int64))
    p = np.zeros((h, w + 2), dtype=np.int8)
    p[:, 1:-1] = img
    dif = np.diff(p, axis=1)
    del p
    sr, sc = np.nonzero(dif == 1)  # run starts (col), row-major order
    _, ec = np.nonzero(dif == -1)  # run ends (exclusive), same order
    del dif
    n = len(sr)
    span = w + 2
    key_start = sr.astype(np.int64) * span + sc
    key_end = sr.astype(np.int64) * span + ec
    # runs of the next row overlapping run i: end > start_i and start < end_i (one more column
    # either side when corners touch; span = w + 2 keeps that inside the next row's keys)
    d = 1 if diagonal else 0
    lo = np.searchsorted(key_end, (sr + 1).astype(np.int64) * span + sc - d, side="right")
    hi = np.searchsorted(key_start, (sr + 1).astype(np.int64) * span + ec + d, side="left")
    cnt = np.maximum(hi - lo, 0)
    u = np.repeat(np.arange(n), cnt)
    v = (np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt)) + np.repeat(lo, cnt)
    parent = np.arange(n)
    while len(u):
        pu, pv = parent[u], parent[v]
        small, big = np.minimum(pu, pv), np.maximum(pu, pv)
        diff = small != big
        if not diff.any():
            break
        np.minimum.at(parent, big[diff], small[diff])
        while True:
            nxt = parent[parent]
            if np.array_equal(nxt, parent):
                break
            parent = nxt
    roots, comp = np.unique(parent, return_inverse=True)
    comp = comp.reshape(-1) + 1
    k = len(roots)
    lengths = ec - sc
    flat = (np.repeat(sr.astype(np.int64) * w + sc, lengths)
            + (np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)))
    labels.reshape(-1)[flat] = np.repeat(comp, lengths)
    box = np.zeros((k + 1, 4), dtype=np.int64)
    box[1:, 0] = box[1:, 1] = np.iinfo(np.int64).max
    np.minimum.at(box[:, 0], comp, sc)
    np.minimum.at(box[:, 1], comp, sr)
    np.maximum.at(box[:, 2], comp, ec)
    np.maximum.at(box[:, 3], comp, sr + 1)
    area = np.bincount(comp, weights=lengths, minlength=k + 1).astype(np.int64)
    return Labelled(labels, k, box, area)


def label(binary: np.ndarray) -> tuple[np.ndarray, int]:
    """4-connected component labels and their count (see `label_components`)."""
    c = label_components(binary)
    return c.labels, c.n


TOPOLOGY_KINDS = ("bridge", "open", "extra", "missing")


def topology(target: np.ndarray, printed: np.ndarray, target_components: Labelled | None = None
             ) -> list[dict[str, Any]]:
    """Topology defects of one print against the target, by overlap of their connected components.

    - bridge: one printed component overlaps two or more target components;
    - open: one target component is overlapped by two or more printed components;
    - extra: a printed component overlaps no target component;
    - missing: a target component is overlapped by no printed component.
    Each record has kind, bbox (canvas px, [x0, y0, x1, y1)), centre x/y, area (of the
    printed component, or the target's for open/missing) and the ids of the components.
    """
    tc = target_components if target_components is not None else label_components(target)
    pc = label_components(printed)
    tl, pl = tc.labels, pc.labels
    tn, pn = tc.n, pc.n
    both = (tl > 0) & (pl > 0)
    pairs = np.unique(np.stack([tl[both], pl[both]], 1), axis=0) if both.any() else np.zeros((0, 2), dtype=np.int32)
    del both
    per_print = np.bincount(pairs[:, 1], minlength=pn + 1)
    per_target = np.bincount(pairs[:, 0], minlength=tn + 1)
    tbox, pbox, tarea, parea = tc.bbox, pc.bbox, tc.area, pc.area
    out: list[dict[str, Any]] = []

    def rec(kind: str, box: np.ndarray, area: int, targets: list[int], prints: list[int]) -> None:
        x0, y0, x1, y1 = (int(v) for v in box)
        out.append({"kind": kind, "bbox": [x0, y0, x1, y1], "x": (x0 + x1) / 2.0, "y": (y0 + y1) / 2.0,
                    "area": int(area), "target_components": targets, "print_components": prints})

    for j in range(1, pn + 1):
        if per_print[j] >= 2:
            rec("bridge", pbox[j], parea[j], [int(i) for i in pairs[pairs[:, 1] == j, 0]], [j])
        elif per_print[j] == 0:
            rec("extra", pbox[j], parea[j], [], [j])
    for i in range(1, tn + 1):
        if per_target[i] >= 2:
            rec("open", tbox[i], tarea[i], [i], [int(j) for j in pairs[pairs[:, 0] == i, 1]])
        elif per_target[i] == 0:
            rec("missing", tbox[i], tarea[i], [i], [])
    out.sort(key=lambda r: (r["y"], r["x"], r["kind"]))
    return out


def topology_counts(records: list[dict[str, Any]]) -> dict[str, int]:
    counts = {k: 0 for k in TOPOLOGY_KINDS}
    for r in records:
        counts[r["kind"]] += 1
    return counts


def pv_band(prints: Mapping[str, np.ndarray], names: list[str] | tuple[str, ...]) -> np.ndarray:
    """Pixels printed at some of the named corners but not at all of them (max xor min for two)."""
    it = iter(names)
    first = prints[next(it)]
    anyp, allp = first.copy(), first.copy()
    for n in it:
        anyp |= prints[n]
        allp &= prints[n]
    return anyp & ~allp


def components(binary: np.ndarray) -> list[dict[str, Any]]:
    """Connected regions of a binary map (edge-connected, merged by klayout): area, bbox, centre (pixels)."""
    if not binary.any():
        return []
    region = raster_to_region(binary)
    out = []
    for poly in region.each():
        box = poly.bbox()
        area = poly.area()
        out.append({"area": int(area), "bbox": [box.left, box.bottom, box.right, box.top],
                    "x": (box.left + box.right) / 2.0, "y": (box.bottom + box.top) / 2.0})
    out.sort(key=lambda c: (c["y"], c["x"], -c["area"]))
    return out


def score(l2: int, pvb: int, epe: int) -> dict[str, Any]:
    return {"l2_nm2": int(l2), "pvb_nm2": int(pvb), "epe_violations": int(epe)}
