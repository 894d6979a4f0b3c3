"""The pages of `dome serve` (pure: a ledger's facts in, HTML out). The run page is the
report's page (`coordinator.report.html.render_html`, without pictures) plus the tile map,
wrapped so that server-sent events can replace it in place."""
from __future__ import annotations

import json
from html import escape
from typing import Any, Mapping, Sequence

from coordinator.report.html import CSS, render_html
from coordinator.report.model import ReportModel, build_model
from coordinator.report.svg import color_for
from coordinator.report.tiles import node_states, tile_map_svg, tiles_of_queue

LIVE_JS = """
<script>
(function(){
  var live=document.getElementById('live'); var updates=0;
  document.body.setAttribute('data-loaded', String(Date.now()));
  var es=new EventSource(live.getAttribute('data-events'));
  es.addEventListener('update', function(e){
    var d=JSON.parse(e.data);
    live.innerHTML=d.html; live.setAttribute('data-seq', String(d.seq)); live.setAttribute('data-status', d.status);
    updates+=1; document.body.setAttribute('data-updates', String(updates));
    if(d.final){es.close(); document.body.setAttribute('data-final','1');}
  });
})();
</script>"""


def model_of(run_id: str, events: Sequence[Mapping[str, Any]]) -> ReportModel:
    return build_model(run_id, events)


def live_fragment(m: ReportModel, queue: Mapping[str, Any] | None) -> str:
    """What the live page shows of a run: the report's body, then the tile map when tiled."""
    page = render_html(m)
    body = page.split("<body>", 1)[-1].rsplit("</body>", 1)[0]
    tiles = tiles_of_queue(queue or {})
    if tiles:
        body += ("<h2>Tile map</h2><p class=\"muted\">One cell per tile, coloured by its task's state.</p>"
                 + tile_map_svg(tiles, node_states(m.attempts)))
    return body


def run_page(run_id: str, seq: int, status: str, fragment: str) -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>dome run {escape(run_id)} (live)</title><style>{CSS}</style></head><body>
<p class="muted"><a href="/">all runs</a> · live: this page follows the ledger</p>
<div id="live" data-run="{escape(run_id)}" data-seq="{seq}" data-status="{escape(status)}"
 data-events="/runs/{escape(run_id)}/events">{fragment}</div>
{LIVE_JS}
</body></html>
"""


def runs_page(rows: Sequence[Mapping[str, Any]]) -> str:
    body = "".join(
        f'<tr data-run="{escape(r["run_id"])}"><td><a href="/runs/{escape(r["run_id"])}">'
        f'<code>{escape(r["run_id"])}</code></a></td>'
        f'<td class="status"><span class="badge" style="background:{color_for(r["status"])}">'
        f'{escape(r["status"])}</span></td><td>{r["events"]}</td><td>{escape(r["started"])}</td></tr>'
        for r in rows)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>dome runs</title><style>{CSS}</style></head><body>
<h1>dome runs</h1>
<table id="runs"><tr><th>run</th><th>status</th><th>events</th><th>started</th></tr>{body}</table>
</body></html>
"""


def sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()
