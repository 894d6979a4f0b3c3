"""The litho report of a run whose DRC finds markers, as headless Chromium
renders it, checked against the ledger and the DRC's own violations.

A real run through `dome run`: an ILT mask for ICCAD 2013 clip 1 (a short
schedule), then `drc.run` with the built-in mask-rule deck at strict limits
(60 nm width and space), so the mask has markers of two rules; then
`dome report` with pictures."""
from __future__ import annotations

import base64
import io
import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ledger.blobs import BlobStore
from tests.conftest import REPO_ROOT, dome_cli
from tests.report.test_report_page import Page, check_page, ledger_events, rendered

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

STRICT = {"min_width": "0.06", "min_space": "0.06", "min_area": "0.004"}


@pytest.fixture(scope="module")
def drc_run(tmp_path_factory, iccad13: Path) -> dict:
    from tests.examples.test_iccad13_flagship import _make_repo_module

    base = tmp_path_factory.mktemp("litho-drc")
    repo = _make_repo_module().make_repo(base / "repo", iccad13)
    quick = json.loads((REPO_ROOT / "examples" / "iccad13" / "work.quick.json").read_text())
    optimize = quick["tasks"][0]
    optimize["action_spec"]["params"]["iterations"] = 5
    drc = {"node_id": "drc-t1", "required_capabilities": ["read"], "required_outputs": ["evidence:drc"],
           "containers": [], "dependencies": [optimize["node_id"]], "timeout_s": 600,
           "action_spec": {"intent": "drc.run", "params": {
               "deck": "builtin:mask_rules", "script_type": "python", "layout": "masks/M1_test1.oas",
               "params": STRICT}}}
    queue = {**quick, "repo": str(repo), "promote_to": "refs/heads/strict", "tasks": [optimize, drc],
             "validations": [v for v in quick["validations"] if v["suite"] != "drc"]}
    qfile = base / "work.queue.json"
    qfile.write_text(json.dumps(queue))
    ops = base / "ops"
    res = dome_cli("run", str(qfile), "--ops-root", str(ops), "--json", timeout=600)
    out = json.loads(res.stdout)
    html = base / "report.html"
    rep = dome_cli("report", out["run_id"], "--ops-root", str(ops), "--html", str(html), timeout=600)
    assert rep.returncode == 0, rep.stderr[-2000:]
    return {"base": base, "ops": ops, "run": out, "html": html, "stderr": res.stderr}


class Figures(HTMLParser):
    """Every picture on the page with its alt text, class and caption, and the h3 headings."""

    def __init__(self, dom: str) -> None:
        super().__init__()
        self.figures: list[dict] = []
        self.h3: list[str] = []
        self._fig: dict | None = None
        self._text: list[str] | None = None
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "figure":
            self._fig = {"caption": ""}
        elif tag == "img" and self._fig is not None:
            self._fig.update(alt=a.get("alt", ""), cls=a.get("class") or "", src=a.get("src", ""))
        elif tag in ("figcaption", "h3"):
            self._text = []

    def handle_endtag(self, tag):
        if tag == "figcaption" and self._fig is not None and self._text is not None:
            self._fig["caption"], self._text = "".join(self._text).strip(), None
        elif tag == "h3" and self._text is not None:
            self.h3.append("".join(self._text).strip())
            self._text = None
        elif tag == "figure" and self._fig is not None:
            self.figures.append(self._fig)
            self._fig = None

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)


def _png(src: str) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))).convert("RGB")).astype(int)


def test_drc_close_ups_on_the_page_are_the_ledgers_markers(drc_run: dict, tmp_path: Path) -> None:
    run_id = drc_run["run"]["run_id"]
    assert drc_run["run"]["status"] == "promoted", drc_run["stderr"][-3000:]
    page, events = check_page(drc_run["html"], drc_run["ops"], run_id, tmp_path)  # fits 760 and 390 px
    dom = rendered(drc_run["html"], 760, tmp_path)
    (done,) = [e for e in events if e["topic"] == "task.completed" and e["node_id"] == "drc-t1"]
    summary = done["payload"]["summary"]
    (viol,) = [i for i in done["payload"]["evidence"] if i["kind"] == "drc_violations"]
    blob = BlobStore(drc_run["ops"] / "blobs").path(viol["digest"])
    markers = json.loads(blob.read_text())["violations"]
    assert summary["marker_count"] == len(markers) > 12 and len(summary["rule_counts"]) == 2
    # the table per task and the counts by rule, as the ledger has them
    rows = Page(dom).tables["Mask rules (DRC) per mask"]
    assert ["drc-t1", "masks/M1_test1.oas", "mask_rules.py", str(summary["marker_count"]),
            ", ".join(f"{r}: {n}" for r, n in sorted(summary["rule_counts"].items()))] in rows
    for rule, n in summary["rule_counts"].items():
        assert [rule, str(n)] in rows
    figs = Figures(dom)
    assert f"masks/M1_test1.oas: {summary['marker_count']} marker(s)" in figs.h3
    # twelve close-ups, each at one of the DRC's markers, both rules shown
    crops = [f for f in figs.figures if f["cls"] == "crop"]
    assert [f["alt"] for f in crops] == [f"masks/M1_test1.oas marker {i}" for i in range(1, 13)]
    places = {(m["rule_id"], float(m["location_nm"][0]), float(m["location_nm"][1])) for m in markers}
    shown = set()
    for f in crops:
        rule, at = f["caption"].split(" at ")
        x, y = at.removeprefix("(").removesuffix(") nm").split(", ")
        shown.add((rule, float(x), float(y)))
        img = _png(f["src"])
        assert img.shape == (240, 240, 3)
        ring = (img[:, :, 0] > 230) & (img[:, :, 1] > 110) & (img[:, :, 1] < 170) & (img[:, :, 2] < 60)
        ys, xs = np.nonzero(ring)
        assert ys.size > 20 and abs(ys.mean() - 120) < 3 and abs(xs.mean() - 120) < 3, f["caption"]
    assert len(shown) == 12 and shown <= places
    assert {r for r, _, _ in shown} == set(summary["rule_counts"])
    # the clip's own pictures: 480 px, with the legend
    clip = [f for f in figs.figures if f["alt"].startswith("M1_test1 ")]
    assert {f["caption"] for f in clip} >= {"target", "optimized mask", "print, nominal", "EPE violations"}
    assert all(_png(f["src"]).shape == (480, 480, 3) for f in clip)
    text = drc_run["html"].read_text()
    assert "the bar at the bottom left gives the scale" in text and "DRC marker</p>" in text
    assert ledger_events(drc_run["ops"], run_id) == events  # the report changed nothing in the ledger
