"""Small SVG charts for the benchmarks: a line/scatter plot and a histogram (standard library only).

Pure functions: data in, SVG text out. Each chart has axes with ticks and labels, a title and
a legend; points carry `data-x`/`data-y` with the values they stand for, so a test (or a
reader of the file) can check that a mark sits where its value says.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence
from xml.sax.saxutils import escape, quoteattr

# colours told apart by most readers, colour-blind ones included (Okabe-Ito)
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
WIDTH, HEIGHT = 720, 420
LEFT, RIGHT, TOP, BOTTOM = 72, 32, 40, 56  # the plot area's margins, in pixels
LEGEND_ROW = 18


@dataclass(frozen=True)
class Series:
    label: str
    points: Sequence[tuple[float, float]]
    lines: bool = True  # join the points in x order (False: markers only)


@dataclass(frozen=True)
class Axis:
    lo: float
    hi: float
    log: bool
    pixel_lo: float
    pixel_hi: float

    def to_pixel(self, v: float) -> float:
        if self.log:
            v, lo, hi = math.log10(v), math.log10(self.lo), math.log10(self.hi)
        else:
            lo, hi = self.lo, self.hi
        return self.pixel_lo + (v - lo) / (hi - lo) * (self.pixel_hi - self.pixel_lo)


def nice_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten) covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(count - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    if ticks[-1] < hi:
        ticks.append(round(t, 12))
    return ticks


def log_ticks(lo: float, hi: float) -> list[float]:
    """Powers of ten covering [lo, hi] (lo > 0)."""
    return [10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]


def fmt(v: float) -> str:
    """A tick label: thousands separated, no needless decimals."""
    if v == 0:
        return "0"
    if abs(v) >= 1000 or float(v).is_integer():
        return f"{v:,.0f}"
    return f"{v:.3g}"


def _axis(values: list[float], log: bool, pixel_lo: float, pixel_hi: float, zero: bool) -> tuple[Axis, list[float]]:
    lo, hi = min(values), max(values)
    if log:
        ticks = log_ticks(lo, hi)
    else:
        ticks = nice_ticks(min(lo, 0.0) if zero else lo, hi)
    return Axis(ticks[0], ticks[-1], log, pixel_lo, pixel_hi), ticks


def _frame(title: str, x: Axis, xt: list[float], y: Axis, yt: list[float], x_label: str, y_label: str) -> list[str]:
    out = [f'<text x="{WIDTH / 2:.1f}" y="22" text-anchor="middle" font-size="15" font-weight="bold">'
           f"{escape(title)}</text>",
           f'<rect x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" height="{HEIGHT - TOP - BOTTOM}" '
           'fill="none" stroke="#444"/>']
    for t in xt:
        px = x.to_pixel(t)
        out.append(f'<line class="xtick" data-v="{t:g}" x1="{px:.2f}" x2="{px:.2f}" y1="{TOP}" '
                   f'y2="{HEIGHT - BOTTOM + 5}" stroke="#ddd"/>')
        out.append(f'<text x="{px:.2f}" y="{HEIGHT - BOTTOM + 19}" text-anchor="middle">{fmt(t)}</text>')
    for t in yt:
        py = y.to_pixel(t)
        out.append(f'<line class="ytick" data-v="{t:g}" x1="{LEFT - 5}" x2="{WIDTH - RIGHT}" y1="{py:.2f}" '
                   f'y2="{py:.2f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 8}" y="{py + 4:.2f}" text-anchor="end">{fmt(t)}</text>')
    out.append(f'<text class="xlabel" x="{(LEFT + WIDTH - RIGHT) / 2:.1f}" y="{HEIGHT - 12}" '
               f'text-anchor="middle">{escape(x_label)}</text>')
    cy = (TOP + HEIGHT - BOTTOM) / 2
    out.append(f'<text class="ylabel" x="16" y="{cy:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 16 {cy:.1f})">{escape(y_label)}</text>')
    return out


def _legend(labels: list[str]) -> list[str]:
    """One row per series under the chart, so it never hides a mark."""
    out = []
    for i, label in enumerate(labels):
        ly = HEIGHT + 4 + LEGEND_ROW * i
        colour = PALETTE[i % len(PALETTE)]
        out.append(f'<g class="legend"><rect x="{LEFT}" y="{ly - 9}" width="12" height="12" fill="{colour}"/>'
                   f'<text x="{LEFT + 18}" y="{ly + 1}">{escape(label)}</text></g>')
    return out


def _document(body: list[str], title: str, legend_rows: int) -> str:
    height = HEIGHT + LEGEND_ROW * legend_rows
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>', *body, "</svg>", ""])


def line_plot(series: Sequence[Series], *, title: str, x_label: str, y_label: str,
              log_x: bool = False, log_y: bool = False, y_from_zero: bool = True,
              x_ticks: Sequence[float] | None = None) -> str:
    """Each series as markers (joined by a line unless `lines` is off), on shared axes.

    `x_ticks` names the x ticks (as for numbered items); the axis then reaches half a step past
    the first and the last, so no marker sits on the frame."""
    xs = [p[0] for s in series for p in s.points]
    ys = [p[1] for s in series for p in s.points]
    if not xs:
        raise ValueError("nothing to plot")
    if x_ticks:
        xt = list(x_ticks)
        half = (xt[1] - xt[0]) / 2 if len(xt) > 1 else 0.5
        x = Axis(min(xt + xs) - half, max(xt + xs) + half, False, LEFT, WIDTH - RIGHT)
    else:
        x, xt = _axis(xs, log_x, LEFT, WIDTH - RIGHT, zero=False)
    y, yt = _axis(ys, log_y, HEIGHT - BOTTOM, TOP, zero=y_from_zero)
    body = _frame(title, x, xt, y, yt, x_label, y_label)
    for i, s in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        pts = sorted(s.points)
        pix = [(x.to_pixel(a), y.to_pixel(b)) for a, b in pts]
        if s.lines and len(pix) > 1:
            body.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="'
                        + " ".join(f"{a:.2f},{b:.2f}" for a, b in pix) + '"/>')
        for (a, b), (px, py) in zip(pts, pix):
            body.append(f'<circle class="point" data-series={quoteattr(s.label)} data-x="{a:g}" data-y="{b:g}" '
                        f'cx="{px:.2f}" cy="{py:.2f}" r="4" fill="{colour}"/>')
    return _document(body + _legend([s.label for s in series]), title, len(series))


def bin_edges(samples: Sequence[float], bins: int, log: bool) -> list[float]:
    lo, hi = min(samples), max(samples)
    if hi <= lo:
        hi = lo * 1.01 + 1e-9
    if log:
        a, b = math.log10(lo), math.log10(hi)
        edges = [10 ** (a + (b - a) * i / bins) for i in range(bins + 1)]
    else:
        edges = [lo + (hi - lo) * i / bins for i in range(bins + 1)]
    edges[0], edges[-1] = lo, hi  # exact: rounding must not leave the extreme samples outside
    return edges


def counts(samples: Sequence[float], edges: Sequence[float]) -> list[int]:
    """How many samples fall in each bin; the last bin includes its upper edge."""
    out = [0] * (len(edges) - 1)
    for v in samples:
        for i in range(len(out)):
            if edges[i] <= v < edges[i + 1] or (i == len(out) - 1 and v == edges[-1]):
                out[i] += 1
                break
    return out


def histogram(samples: dict[str, Sequence[float]], *, title: str, x_label: str, y_label: str = "calls",
              bins: int = 40, log_x: bool = False) -> str:
    """Each sample set as a step outline over shared bins (log-spaced with `log_x`)."""
    every = [v for vs in samples.values() for v in vs]
    if not every:
        raise ValueError("nothing to plot")
    edges = bin_edges(every, bins, log_x)
    per = {label: counts(vs, edges) for label, vs in samples.items()}
    x, xt = _axis([edges[0], edges[-1]], log_x, LEFT, WIDTH - RIGHT, zero=False)
    y, yt = _axis([0.0, float(max(max(c) for c in per.values()))], False, HEIGHT - BOTTOM, TOP, zero=True)
    body = _frame(title, x, xt, y, yt, x_label, y_label)
    for i, (label, cs) in enumerate(per.items()):
        colour = PALETTE[i % len(PALETTE)]
        path = [(x.to_pixel(edges[0]), y.to_pixel(0))]
        for j, c in enumerate(cs):
            path += [(x.to_pixel(edges[j]), y.to_pixel(c)), (x.to_pixel(edges[j + 1]), y.to_pixel(c))]
        path.append((x.to_pixel(edges[-1]), y.to_pixel(0)))
        body.append(f'<polygon class="bars" data-series={quoteattr(label)} fill="{colour}" fill-opacity="0.25" '
                    f'stroke="{colour}" stroke-width="1.5" points="'
                    + " ".join(f"{a:.2f},{b:.2f}" for a, b in path) + '"/>')
    return _document(body + _legend(list(per)), title, len(per))
