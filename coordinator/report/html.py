"""Render a ReportModel as one self-contained HTML page (pure)."""
from __future__ import annotations

import base64
from dataclasses import dataclass, field
from html import escape
from typing import Any, Mapping

from .model import ReportModel
from .svg import color_for, evidence_graph_svg, timeline_svg

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px auto;max-width:1100px;color:#222}
h1{font-size:22px;margin-bottom:4px} h2{font-size:17px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
.badge{display:inline-block;padding:3px 10px;border-radius:12px;color:#fff;font-weight:600}
table{border-collapse:collapse;font-size:13px;margin:6px 0} td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f3f3f3} code{font-size:12px} .muted{color:#777} .grid{display:flex;flex-wrap:wrap;gap:10px}
figure{margin:0;text-align:center;font-size:12px} figure img{width:200px;height:200px;image-rendering:pixelated;border:1px solid #ccc}
.kv td:first-child{font-weight:600;background:#fafafa}
"""

ROLE_TITLES = {"target": "target", "mask": "optimized mask", "print_nominal": "print, nominal",
               "print_max": "print, max dose", "print_min": "print, min (defocus)", "violations": "EPE violations"}


@dataclass
class ClipSection:
    name: str
    images: dict[str, bytes] = field(default_factory=dict)  # role -> PNG bytes
    metrics: dict[str, Any] = field(default_factory=dict)
    published: list[Mapping[str, Any]] = field(default_factory=list)  # rows of published_results.csv


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


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
    return (f'<h3>{escape(c.name)}</h3><div class="grid">{figs}</div>'
            + _table(["method", "L2 (nm²)", "PVB (nm²)", "EPE violations", "conventions"], rows))


def render_html(m: ReportModel, clips: list[ClipSection] | None = None) -> str:
    verdict = m.status
    man, fin = m.manifest, m.finished
    summary = _kv([
        ("run", m.run_id), ("verdict", verdict), ("repository", man.get("repo", "")),
        ("base", f"{man.get('base_ref_input', '')} = {str(man.get('base_ref', ''))[:12]}"),
        ("integration head", str(fin.get("head") or "")[:12]), ("promoted to", fin.get("promoted_ref") or "-"),
        ("policy", man.get("policy_version", man.get("policy", ""))), ("seed", man.get("determinism_seed", "")),
        ("waves / attempts", f"{m.waves} / {len(m.attempts)}"), ("duration", f"{m.duration_s:.1f} s"),
        ("events in ledger", m.event_count),
    ])
    missing = fin.get("missing") or m.gate.get("missing") or []
    missing_html = ""
    if missing:
        missing_html = "<p><b>Missing or failing links:</b></p><ul>" + "".join(
            f"<li><code>{escape(str(x))}</code></li>" for x in missing) + "</ul>"
    links = _table(["link", "status", "detail"], [[l.get("link"), l.get("status"), l.get("detail", "")]
                                                   for l in m.gate.get("links", [])]) if m.gate else \
        '<p class="muted">No gate decision was computed for this run.</p>'
    proposals = _table(["node", "proposal", "status", "files", "why"],
                       [[r.node_id, r.proposal_id, r.status, ", ".join(r.files[:6]) + (" ..." if len(r.files) > 6 else ""),
                         r.why] for r in m.proposals]) if m.proposals else '<p class="muted">No proposals.</p>'
    validations = _table(["suite", "result", "head", "duration (s)", "proposals included"],
                         [[v.suite, "pass" if v.passed else "FAIL", v.head_ref,
                           "" if v.duration_s is None else f"{v.duration_s:.2f}", len(v.proposals)]
                          for v in m.validations]) if m.validations else '<p class="muted">No validations ran.</p>'
    usage = m.model_usage or {}
    usage_html = ""
    if usage.get("attempts"):
        run = usage["run"]
        usage_html = "<h2>Model usage</h2>" + _table(
            ["node", "attempt", "calls", "tokens in", "tokens out", "cost (USD)"],
            [[r["node_id"], r["node_execution_id"], r["calls"], r["tokens_in"], r["tokens_out"],
              f"{r['cost_micros'] / 1e6:.6f}"] for r in usage["attempts"]]
            + [["run", "", run["calls"], run["tokens_in"], run["tokens_out"], f"{run['cost_micros'] / 1e6:.6f}"]])
    clip_html = ""
    if clips:
        clip_html = "<h2>Lithography: per-clip results</h2>" + "".join(_clip_html(c) for c in clips)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>dome run {escape(m.run_id)}</title>
<style>{CSS}</style></head><body>
<h1>dome run <code>{escape(m.run_id)}</code></h1>
<p><span class="badge" style="background:{color_for(verdict)}">{escape(verdict)}</span></p>
<h2>Summary</h2>{summary}{missing_html}
<h2>Wave timeline</h2><p class="muted">One row per task, one bar per attempt; colour is the outcome
(green completed, red failed, orange timeout, grey cancelled). Hover a bar for its attempt id.</p>
{timeline_svg(m.attempts)}
<h2>Evidence chain</h2><p class="muted">Promotion needs every link below the gate to be present and signed.</p>
{evidence_graph_svg(m.chain_nodes, m.chain_edges)}
{links}
<h2>Proposals</h2>{proposals}
<h2>Validations</h2>{validations}{usage_html}
{clip_html}
<p class="muted">Re-check this run offline with <code>dome verify {escape(m.run_id)}</code>.</p>
</body></html>
"""
