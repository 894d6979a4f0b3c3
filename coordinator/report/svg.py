"""Small, dependency-free SVG renderers for the report (pure functions)."""
from __future__ import annotations

from dataclasses import dataclass
from html import escape

STATUS_COLORS = {
    "ok": "#2e7d32", "completed": "#2e7d32", "applied": "#2e7d32", "passed": "#2e7d32",
    "present": "#2e7d32", "promoted": "#2e7d32",
    "failed": "#c62828", "missing": "#c62828", "invalid": "#c62828", "rejected": "#c62828",
    "timeout": "#ef6c00", "cancelled": "#757575", "dropped": "#757575", "blocked": "#ef6c00",
    "running": "#1565c0", "ejected": "#ad1457", "split": "#6a1b9a", "not_integrated": "#757575",
    "awaiting_resolver": "#ef6c00", "resolved": "#00838f", "submitted": "#546e7a",
    "integration": "#37474f",
}
WAVE_LABEL_GAP = 22  # px: a wave label closer than this to the previous one is left out (its line keeps a title)


def color_for(status: str) -> str:
    return STATUS_COLORS.get(status, "#546e7a")


@dataclass(frozen=True)
class Attempt:
    lane: str  # node id: one row per node
    label: str  # node_execution_id (short)
    start: float  # seconds since run start
    end: float
    status: str
    wave: int
    order: int = 0  # its dispatch's place in the ledger: breaks ties between equal starts (records
    # written in one transaction share one time stamp)


def _pack(attempts: list[Attempt]) -> dict[int, int]:
    """Sub-row of each attempt within its lane, so overlapping attempts
    (endgame duplicates, retries) sit side by side instead of on top."""
    slot: dict[int, int] = {}
    ends: dict[str, list[float]] = {}
    for i, a in sorted(enumerate(attempts), key=lambda ia: (ia[1].lane, ia[1].start, ia[1].label)):
        rows = ends.setdefault(a.lane, [])
        for r, end in enumerate(rows):
            if end <= a.start:
                rows[r] = a.end
                slot[i] = r
                break
        else:
            rows.append(a.end)
            slot[i] = len(rows) - 1
    return slot


def _tick_step(span: float) -> float:
    """A round step giving 4-8 ticks over `span` seconds (1, 2, 5 x 10^k)."""
    import math
    raw = max(span, 1e-6) / 6
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def _fmt_s(t: float) -> str:
    if t >= 120:
        return f"{int(t // 60)}m{int(t % 60):02d}s"
    return f"{t:.0f}s" if t >= 10 or t == int(t) else f"{t:.1f}s"


def _lane_label(lane: str, label_w: int) -> str:
    """A lane's name cut to the label column (7 px a character), so it never runs into the bars."""
    n = max(4, (label_w - 8) // 7)
    return lane if len(lane) <= n else lane[: n - 1] + "…"


def timeline_svg(attempts: list[Attempt], *, width: int = 960, bar_h: int = 12,
                 duration: float | None = None, wave_starts: list[float] | None = None) -> str:
    """Gantt-style chart: one band per node, one bar per attempt, coloured by
    outcome. Rows in order of their first start; dashed lines where waves
    start; the axis spans the run's whole duration."""
    if not attempts:
        return '<svg xmlns="http://www.w3.org/2000/svg" width="300" height="30"><text x="4" y="20">no attempts</text></svg>'
    first: dict[str, tuple[float, int]] = {}
    for a in attempts:
        first[a.lane] = min(first.get(a.lane, (a.start, a.order)), (a.start, a.order))
    lanes = sorted(first, key=lambda lane: (first[lane], lane))
    slot = _pack(attempts)
    depth = {lane: 1 + max(slot[i] for i, a in enumerate(attempts) if a.lane == lane) for lane in lanes}
    top: dict[str, int] = {}
    y = 24
    for lane in lanes:
        top[lane] = y
        y += depth[lane] * (bar_h + 4) + 4
    label_w = min(220, 7 * min(30, max(len(l) for l in lanes)) + 12)
    t_end = max(duration or 0.0, max(a.end for a in attempts), 1e-6)
    plot_w = width - label_w - 20
    height = y + 30
    scale = plot_w / t_end
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
             f'height="{height}" style="max-width:100%;height:auto" font-family="sans-serif" font-size="11" '
             f'role="img" aria-label="wave timeline">']
    for i, lane in enumerate(lanes):
        band = depth[lane] * (bar_h + 4) + 4
        if i % 2 == 0:
            parts.append(f'<rect x="0" y="{top[lane]}" width="{width}" height="{band}" fill="#f5f5f5"/>')
        parts.append(f'<text class="lane" x="4" y="{top[lane] + bar_h}">{escape(_lane_label(lane, label_w))}</text>')
    last_label = -1e9
    for k, ws in enumerate(wave_starts or []):
        x = label_w + ws * scale
        parts.append(f'<line class="wave" x1="{x:.1f}" y1="14" x2="{x:.1f}" y2="{y}" stroke="#9e9e9e" '
                     f'stroke-dasharray="3,3"><title>wave {k + 1} starts at {ws:.1f} s</title></line>')
        if x - last_label >= WAVE_LABEL_GAP:  # labels never print on top of each other
            parts.append(f'<text class="wave-label" x="{x + 2:.1f}" y="12" fill="#757575" font-size="9">w{k + 1}</text>')
            last_label = x
    for i, a in enumerate(attempts):
        by = top[a.lane] + 4 + slot[i] * (bar_h + 4)
        x = label_w + a.start * scale
        w = max(2.0, (a.end - a.start) * scale)
        parts.append(
            f'<rect x="{x:.1f}" y="{by}" width="{w:.1f}" height="{bar_h}" rx="2" '
            f'fill="{color_for(a.status)}"><title>{escape(a.label)} wave {a.wave}: {escape(a.status)} '
            f'({a.end - a.start:.2f} s)</title></rect>')
    axis_y = height - 22
    parts.append(f'<line x1="{label_w}" y1="{axis_y}" x2="{label_w + plot_w}" y2="{axis_y}" stroke="#999"/>')
    step = _tick_step(t_end)
    k = 0
    while k * step <= t_end + 1e-9:
        x = label_w + k * step * scale
        parts.append(f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{axis_y + 4}" stroke="#999"/>'
                     f'<text class="tick" x="{x:.1f}" y="{axis_y + 16}" text-anchor="middle">{_fmt_s(k * step)}</text>')
        k += 1
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True)
class ChainNode:
    node_id: str
    kind: str  # StackPlan, ApplyResult, ValidationReport, PromotionDecision, ...
    label: str
    status: str  # present | missing | failed | ...


def evidence_graph_svg(nodes: list[ChainNode], edges: list[tuple[str, str]], *, width: int = 960) -> str:
    """Layered left-to-right graph of the evidence chain; columns by artifact kind."""
    order = ["WorkQueue", "PatchProposal", "StackPlan", "ApplyResult", "ValidationReport",
             "GateDecision", "PromotionDecision"]
    columns: dict[str, list[ChainNode]] = {}
    for n in nodes:
        columns.setdefault(n.kind, []).append(n)
    kinds = [k for k in order if k in columns] + sorted(k for k in columns if k not in order)
    box_w, box_h, gap_y = 150, 34, 10
    col_w = max(box_w + 30, (width - 20) // max(1, len(kinds)))
    tallest = max((len(v) for v in columns.values()), default=1)
    height = 40 + tallest * (box_h + gap_y)
    pos: dict[str, tuple[float, float]] = {}
    full_w = max(width, col_w * len(kinds) + 20)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {full_w} {height}" width="{full_w}" '
             f'height="{height}" style="max-width:100%;height:auto" font-family="sans-serif" font-size="10" '
             f'role="img" aria-label="evidence chain">']
    for ci, kind in enumerate(kinds):
        x = 10 + ci * col_w
        parts.append(f'<text x="{x}" y="14" font-weight="bold">{escape(kind)}</text>')
        for ri, n in enumerate(sorted(columns[kind], key=lambda n: n.node_id)):
            y = 24 + ri * (box_h + gap_y)
            pos[n.node_id] = (x, y)
    for src, dst in edges:
        if src in pos and dst in pos:
            (x1, y1), (x2, y2) = pos[src], pos[dst]
            parts.append(f'<line x1="{x1 + box_w}" y1="{y1 + box_h / 2}" x2="{x2}" y2="{y2 + box_h / 2}" '
                         f'stroke="#90a4ae" stroke-width="1"/>')
    for n in nodes:
        x, y = pos[n.node_id]
        c = color_for(n.status)
        parts.append(f'<rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="4" fill="white" '
                     f'stroke="{c}" stroke-width="2"><title>{escape(n.node_id)}: {escape(n.status)}</title></rect>')
        parts.append(f'<text x="{x + 5}" y="{y + 14}">{escape(n.label[:24])}</text>')
        parts.append(f'<text x="{x + 5}" y="{y + 27}" fill="{c}">{escape(n.status)}</text>')
    parts.append("</svg>")
    return "".join(parts)
