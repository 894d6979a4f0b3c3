"""Render a ReportModel as one self-contained HTML page (pure)."""
from __future__ import annotations

import base64
from dataclasses import dataclass, field
from html import escape
from typing import Any, Mapping

from .explain import cost_line
from .model import ReportModel
from .svg import color_for, evidence_graph_svg, timeline_svg

CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:16px auto;max-width:1100px;padding:0 12px;color:#222}
h1{font-size:20px;margin-bottom:4px;overflow-wrap:anywhere} h2{font-size:17px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
.badge{display:inline-block;padding:2px 9px;border-radius:12px;color:#fff;font-weight:600;font-size:12px;white-space:nowrap}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:13px;margin:6px 0} td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
td{overflow-wrap:break-word} th{background:#f3f3f3} td:first-child{white-space:nowrap} code{font-size:12px;overflow-wrap:anywhere} .muted{color:#777}
.grid{display:flex;flex-wrap:wrap;gap:10px}
figure{margin:0;text-align:center;font-size:12px;max-width:100%} figure img{width:480px;max-width:100%;height:auto;aspect-ratio:1;image-rendering:pixelated;border:1px solid #ccc;cursor:zoom-in}
figure img.crop{width:240px}
figure img:focus{position:fixed;inset:0;margin:auto;width:min(96vw,96vh);height:min(96vw,96vh);z-index:10;box-shadow:0 0 0 100vmax rgba(0,0,0,.6);cursor:zoom-out;outline:none}
.legend span{display:inline-block;width:12px;height:12px;vertical-align:middle;margin:0 4px 0 10px;border:1px solid #999}
.kv td:first-child{font-weight:600;background:#fafafa;white-space:nowrap}
details>summary{cursor:pointer;color:#1565c0} details pre.diff{max-height:480px;overflow:auto;white-space:pre}
pre.diff .add{color:#1b5e20} pre.diff .del{color:#b71c1c}
ul.why li{margin:3px 0} .note{background:#fff8e1;border-left:4px solid #f9a825;padding:4px 8px} pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f7f7f7;padding:4px 6px;margin:2px 0;font-size:12px}
@media (max-width:600px){body{margin:8px auto} td,th{padding:2px 4px;font-size:12px}}
"""

ROLE_TITLES = {"target": "target", "mask": "optimized mask", "print_nominal": "print, nominal",
               "print_max": "print, max dose", "print_min": "print, min (defocus)", "violations": "EPE violations"}


@dataclass
class ClipSection:
    name: str
    images: dict[str, bytes] = field(default_factory=dict)  # role -> PNG bytes
    metrics: dict[str, Any] = field(default_factory=dict)
    published: list[Mapping[str, Any]] = field(default_factory=list)  # rows of published_results.csv
    iterations: int | None = None  # ILT iterations the mask was optimised with
    tile_map: str = ""  # a tiled mask's tile map section (coordinator.report.tilemap)


def _img(png: bytes, alt: str, cls: str = "") -> str:
    # tabindex: a click (or Tab) focuses the picture and CSS shows it large; click outside to close
    c = f' class="{cls}"' if cls else ""
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}"{c} tabindex="0">'


LEGEND = ('<p class="legend muted">Click a picture to enlarge it; the bar at the bottom left gives the scale.'
          '<span style="background:#cdcdcd"></span>target'
          '<span style="background:#1e5ac8"></span>print<span style="background:#141414"></span>mask, target '
          'alone<span style="border:2px solid #dc1e1e;border-radius:50%"></span>EPE violation</p>')
DRC_LEGEND = ('<p class="legend muted">Close-ups, 240 nm across, centred on each marker (click to enlarge):'
              '<span style="background:#cdcdcd"></span>target<span style="background:#7a7a7a"></span>mask'
              '<span style="background:#1e5ac8"></span>print, nominal'
              '<span style="border:2px solid #ff8c00;border-radius:50%"></span>DRC marker</p>')


def _kv(rows: list[tuple[str, Any]]) -> str:
    return '<table class="kv">' + "".join(
        f"<tr><td>{escape(k)}</td><td>{escape(str(v))}</td></tr>" for k, v in rows) + "</table>"


def _table(head: list[str], rows: list[list[Any]]) -> str:
    h = "".join(f"<th>{escape(c)}</th>" for c in head)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{h}</tr>{body}</table>"


def _clip_html(c: ClipSection) -> str:
    order = list(ROLE_TITLES) + sorted(set(c.images) - set(ROLE_TITLES))
    figs = "".join(f"<figure>{_img(c.images[role], f'{c.name} {ROLE_TITLES.get(role, role)}')}"
                   f"<figcaption>{escape(ROLE_TITLES.get(role, role))}</figcaption></figure>"
                   for role in order if role in c.images)
    rows = [["dome (this run)", c.metrics.get("l2_nm2", ""), c.metrics.get("pvb_nm2", ""),
             c.metrics.get("epe_violations", ""), c.metrics.get("fill", "")]]
    for p in c.published:
        rows.append([p.get("method", ""), p.get("L2_nm2", ""), p.get("PVB_nm2", ""), p.get("EPE", ""),
                     p.get("setting", "")])
    iters = f'<p class="muted">{c.iterations} ILT iterations</p>' if c.iterations else ""
    return (f'<h3>{escape(c.name)}</h3>{iters}{LEGEND if figs else ""}<div class="grid">{figs}</div>'
            + _scroll(_table(["method", "L2 (nm²)", "PVB (nm²)", "EPE violations", "conventions"], rows)))


def _badge(status: str) -> str:
    return f'<span class="badge" style="background:{color_for(status)}">{escape(status.replace("_", " "))}</span>'


def _why_html(m: ReportModel) -> str:
    """The verdict's reasons: what the gate is missing, failed tasks, work that did not land whole."""
    ex = m.explanation
    if ex is None:
        return ""
    items: list[str] = []
    if m.status != "promoted":
        items += [f"<li>gate: <code>{escape(g.link)}</code> {escape(g.status)}"
                  + (f" ({escape(g.detail)})" if g.detail else "") + "</li>" for g in ex.gate_problems]
    for t in ex.failed_tasks:
        tail = f"<pre>{escape(t.stderr_tail)}</pre>" if t.stderr_tail else ""
        items.append(f"<li>task <b>{escape(t.node_id)}</b> failed after {t.attempts} attempt(s): "
                     f"<code>{escape(t.code)}</code> {escape(t.message)}{tail}</li>")
    for r in ex.risk_sources:
        items.append(f"<li class=\"risk\">{escape(_risk_text(r))}</li>")
    for r in m.proposals:
        if r.status not in ("applied", "submitted"):
            items.append(f"<li>{escape(r.node_id)}: {_badge(r.status)} {escape(r.why)}{_failing_html(r.failing_tests)}</li>")
    if not items:
        return ""
    return '<h2>Why</h2><ul class="why">' + "".join(items) + "</ul>"


def _risk_text(r: Mapping[str, Any]) -> str:
    from coordinator.integration.policy import describe_source
    why = describe_source(r)
    return f"risk {r.get('risk')}: raised by {r.get('node_id') or r.get('proposal_id')} ({r.get('proposal_id')}): {why}"


def _failing_html(tests: list[Mapping[str, Any]]) -> str:
    """Failing tests, each with the first lines of its output."""
    if not tests:
        return ""
    return '<ul class="failing">' + "".join(
        f"<li>failing test <code>{escape(str(t.get('name')))}</code>"
        + (f"<pre>{escape(chr(10).join(str(x) for x in t.get('first_lines') or []))}</pre>"
           if t.get("first_lines") else "") + "</li>" for t in tests) + "</ul>"


def _files_html(r: Any) -> str:
    """The full file list, folded; a split says which files landed."""
    landed = set(r.landed_files)
    items = "".join(f"<li>{escape(f)}" + (" <b>(landed)</b>" if f in landed else
                                          " (dropped)" if landed else "") + "</li>" for f in r.files)
    head = f"{len(r.files)} file(s)" + (f", {len(landed)} landed" if landed else "")
    return f'<details class="files"><summary>{escape(head)}</summary><ul>{items}</ul></details>'


def _diff_html(r: Any) -> str:
    if not r.diff:
        return ""
    lines = []
    for ln in r.diff.splitlines():
        cls = "add" if ln.startswith("+") and not ln.startswith("+++") else \
            "del" if ln.startswith("-") and not ln.startswith("---") else ""
        lines.append(f'<span class="{cls}">{escape(ln)}</span>' if cls else escape(ln))
    n = sum(1 for ln in r.diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---")))
    return (f'<details class="diff"><summary>diff ({n} changed lines)</summary>'
            f'<pre class="diff">{chr(10).join(lines)}</pre></details>')


def tasks_html(m: ReportModel) -> str:
    """Every task that ran: its outcome (a change, no change, failed), attempts and exit code."""
    if not m.tasks:
        return '<p class="muted">No task ran.</p>'
    rows = "".join(
        f'<tr data-task="{escape(t.node_id)}"><td>{escape(t.node_id)}</td>'
        f'<td class="outcome">{escape(t.outcome)}</td><td>{t.attempts}</td>'
        f'<td>{"" if t.exit_code is None else t.exit_code}</td>'
        f'<td><code>{escape(t.proposal_id or "")}</code></td><td>{escape(t.detail)}</td></tr>' for t in m.tasks)
    return _scroll('<table id="tasks"><tr><th>task</th><th>outcome</th><th>attempts</th><th>exit code</th>'
                   f'<th>proposal</th><th>detail</th></tr>{rows}</table>')


def _proposal_details(r: Any) -> str:
    bits = []
    if r.parts:
        bits.append("parts: " + ", ".join(r.parts))
    if r.hunks:
        bits.append("at " + ", ".join(r.hunks))
    if r.conflicts_with:
        bits.append("conflicts with " + ", ".join(r.conflicts_with))
    if r.failing_suites:
        bits.append("failing suite: " + ", ".join(r.failing_suites))
    return "; ".join(bits)


def _scroll(inner: str) -> str:
    return f'<div class="scroll">{inner}</div>'


def _num(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _mean(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got and len(got) == len(values) else None


def litho_summary_html(clips: list[ClipSection], quick_iterations: int | None) -> str:
    """One row of averages over the clips beside the best published result for
    the same clips, and the gap; a note when a shortened ILT schedule ran."""
    rows = []
    ours = {k: _mean([_num(c.metrics.get(k)) for c in clips]) for k in ("l2_nm2", "pvb_nm2", "epe_violations")}
    best = [c.published[0] if c.published else {} for c in clips]
    pub = {k: _mean([_num(b.get(col)) for b in best]) for k, col in
           (("l2_nm2", "L2_nm2"), ("pvb_nm2", "PVB_nm2"), ("epe_violations", "EPE"))}

    def fmt(v: float | None) -> str:
        return "" if v is None else f"{v:,.0f}"

    def gap(k: str) -> str:
        o, b = ours[k], pub[k]
        return "" if o is None or b is None or b == 0 else f"{100 * (o - b) / b:+.1f}%"

    rows.append([f"dome, mean of {len(clips)} clip(s)", fmt(ours["l2_nm2"]), fmt(ours["pvb_nm2"]),
                 fmt(ours["epe_violations"])])
    rows.append(["best published per clip, mean", fmt(pub["l2_nm2"]), fmt(pub["pvb_nm2"]),
                 fmt(pub["epe_violations"])])
    rows.append(["gap to best published", gap("l2_nm2"), gap("pvb_nm2"), gap("epe_violations")])
    note = ""
    if quick_iterations:
        note = (f'<p class="note">Quick schedule: the masks were optimised with {quick_iterations} ILT '
                "iterations (set by the work queue), fewer than the full schedule; expect a larger gap "
                "than the full job.</p>")
    return ('<h3>All clips</h3>' + note
            + _scroll(_table(["", "L2 (nm²)", "PVB (nm²)", "EPE violations"], rows)))


def _drc_mask_html(d: dict[str, Any]) -> str:
    """One mask's markers: counts by rule, then up to 12 close-ups (or their places when no pictures)."""
    picked = d.get("picked") or []
    if not picked:
        return ""
    total = d.get("markers") or len(picked)
    shown = f"{len(picked)} of {total}" if total > len(picked) else f"all {total}"
    head = (f'<h3>{escape(str(d.get("layout") or d["node_id"]))}: {total} marker(s)</h3>'
            + _scroll(_table(["rule", "markers"], [[r, n] for r, n in sorted(d["rule_counts"].items())]))
            + f'<p class="muted">Showing {shown} marker(s), every rule before a second of any.</p>')
    crops = d.get("crops") or []
    if crops:
        figs = _crop_figures(str(d.get("layout") or d["node_id"]), crops)
        return head + DRC_LEGEND + f'<div class="grid">{figs}</div>'
    return head + _scroll(_table(["#", "rule", "x (nm)", "y (nm)"],
                                 [[i + 1, m["rule_id"], f"{m['x_nm']:g}", f"{m['y_nm']:g}"]
                                  for i, m in enumerate(picked)]))


def _crop_figures(layout: str, crops: list[dict[str, Any]]) -> str:
    return "".join(f'<figure>{_img(c["png"], f"{layout} marker {i + 1}", "crop")}'
                   f'<figcaption>{escape(c["rule_id"])} at ({c["x_nm"]:g}, {c["y_nm"]:g}) nm</figcaption></figure>'
                   for i, c in enumerate(crops))


def drc_html(drc: list[dict[str, Any]]) -> str:
    if not drc:
        return ""
    rows = [[d["node_id"], d.get("layout") or "", d.get("deck") or "", d.get("markers"),
             ", ".join(f"{rule}: {n}" for rule, n in sorted(d["rule_counts"].items())) or "none"] for d in drc]
    return ("<h2>Mask rules (DRC) per mask</h2>"
            + _scroll(_table(["task", "mask", "deck", "markers", "markers by rule"], rows))
            + "".join(_drc_mask_html(d) for d in drc))


def render_html(m: ReportModel, clips: list[ClipSection] | None = None,
                quick_iterations: int | None = None) -> str:
    verdict = m.status
    if m.explanation is not None and m.explanation.partial:  # the rest landed; these tasks did not
        verdict += " (partial: without " + ", ".join(f"{t.get('node_id')} ({t.get('status')})"
                                                     for t in m.explanation.tasks_not_landed) + ")"
    man, fin = m.manifest, m.finished
    summary = _kv([
        ("run", m.run_id), ("verdict", verdict), ("repository", man.get("repo", "")),
        ("base", f"{man.get('base_ref_input', '')} = {str(man.get('base_ref', ''))[:12]}"),
        ("integration head", str(fin.get("head") or "")[:12]), ("promoted to", fin.get("promoted_ref") or "-"),
        ("policy", man.get("policy_version", man.get("policy", "")) + (
            f" (preset {m.explanation.domain})" if m.explanation is not None and m.explanation.domain else "")),
        ("seed", man.get("determinism_seed", "")),
        ("waves / attempts", f"{m.waves} / {len(m.attempts)}"), ("duration", f"{m.duration_s:.1f} s"),
        ("events in ledger", m.event_count),
        *((("CPU", cost_line(fin["cost"])),) if isinstance(fin.get("cost"), Mapping) else ()),
    ])
    links = _scroll(_table(["link", "status", "detail"], [[l.get("link"), l.get("status"), l.get("detail", "")]
                                                          for l in m.gate.get("links", [])])) if m.gate else \
        '<p class="muted">No gate decision was computed for this run.</p>'
    if m.proposals:
        rows = "".join(
            f"<tr data-proposal=\"{escape(r.proposal_id)}\"><td>{escape(r.node_id)}</td><td><code>{escape(r.proposal_id)}</code></td>"
            f"<td class=\"status\">{_badge(r.status)}</td><td>{_files_html(r)}</td>"
            f"<td>{escape(r.why)}{_failing_html(r.failing_tests)}</td><td>{escape(_proposal_details(r))}{_diff_html(r)}</td></tr>"
            for r in m.proposals)
        proposals = _scroll('<table id="proposals"><tr><th>node</th><th>proposal</th><th>status</th><th>files</th>'
                            f'<th>why</th><th>details</th></tr>{rows}</table>')
    else:
        proposals = '<p class="muted">No proposals.</p>'
    validations = _scroll(_table(["#", "phase", "suite", "result", "checkpoint", "head", "duration (s)", "proposals included",
                                  "failing tests"],
                                 [[i + 1, v.phase, v.suite, "pass" if v.passed else "FAIL", v.checkpoint_id, v.head_ref,
                                   "" if v.duration_s is None else f"{v.duration_s:.2f}", ", ".join(v.proposals),
                                   ", ".join(str(t.get("name")) for t in v.failing_tests)]
                                  for i, v in enumerate(m.validations)])) if m.validations else \
        '<p class="muted">No validations ran.</p>'
    decisions = _scroll(_table(["#", "step", "what happened"], [[d.sequence, d.kind, d.text] for d in m.decisions])) \
        if m.decisions else '<p class="muted">No integration took place.</p>'
    usage = m.model_usage or {}
    usage_html = ""
    if usage.get("attempts"):
        run = usage["run"]
        usage_html = "<h2>Model usage</h2>" + _scroll(_table(
            ["node", "attempt", "calls", "tokens in", "tokens out", "cost (USD)"],
            [[r["node_id"], r["node_execution_id"], r["calls"], r["tokens_in"], r["tokens_out"],
              f"{r['cost_micros'] / 1e6:.6f}"] for r in usage["attempts"]]
            + [["run", "", run["calls"], run["tokens_in"], run["tokens_out"], f"{run['cost_micros'] / 1e6:.6f}"]]))
    clip_html = ""
    if clips:
        clip_html = ("<h2>Lithography: per-clip results</h2>" + litho_summary_html(clips, quick_iterations)
                     + "".join(_clip_html(c) for c in clips))
    clip_html += "".join(c.tile_map for c in clips or ())  # the live page draws without clips
    clip_html += drc_html(m.drc)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>dome run {escape(m.run_id)}</title>
<style>{CSS}</style></head><body>
<h1>dome run <code>{escape(m.run_id)}</code></h1>
<p id="verdict">{_badge(verdict)}</p>
<h2>Summary</h2>{_scroll(summary)}{_why_html(m)}
<h2>Wave timeline</h2><p class="muted">One row per task in the order they started, one bar per attempt; colour
is the outcome (green completed, red failed, orange timeout, grey cancelled); dashed lines mark where each
wave starts. Integration (dark), each validation and each bisection step (green passed, red failed) share
the same axis. Hover a bar for what it is.</p>
{_scroll(timeline_svg([*m.attempts, *m.phases], duration=m.duration_s, wave_starts=m.wave_starts))}
<h2>Tasks</h2><p class="muted">Every task that ran; <i>no change</i> means the tool found nothing to change.</p>
{tasks_html(m)}
<h2>Integration</h2><p class="muted">Every integration decision in the order it was made, with its reason.</p>
{decisions}
<h2>Evidence chain</h2><p class="muted">Promotion needs every link below the gate to be present and signed.</p>
{_scroll(evidence_graph_svg(m.chain_nodes, m.chain_edges))}
{links}
<h2>Proposals</h2>{proposals}
<h2>Validations</h2><p class="muted">Phase <i>final</i> checks the whole stack; <i>bisect</i> checks a prefix of
it to find the proposal that breaks a suite.</p>{validations}{usage_html}
{clip_html}
<p class="muted">Re-check this run offline with <code>dome verify {escape(m.run_id)}</code>.</p>
</body></html>
"""
