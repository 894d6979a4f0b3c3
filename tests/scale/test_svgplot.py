"""The benchmarks' SVG writer, the plots in docs/img, and the links of docs/benchmarks.md."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from benchmarks import svgplot
from benchmarks.svgplot import Series, histogram, line_plot

ROOT = Path(__file__).resolve().parents[2]
NS = {"s": "http://www.w3.org/2000/svg"}


def _ticks(root: ET.Element, cls: str) -> dict[float, float]:
    """tick value -> its pixel (x for x ticks, y for y ticks)."""
    attr = "x1" if cls == "xtick" else "y1"
    return {float(t.get("data-v")): float(t.get(attr)) for t in root.iterfind(f".//s:line[@class='{cls}']", NS)}


def _interp(ticks: dict[float, float], v: float) -> float:
    (a, pa), (b, pb) = sorted(ticks.items())[:2]
    return pa + (v - a) * (pb - pa) / (b - a)


def test_line_plot_is_valid_svg_with_labels_legend_and_points_where_the_data_says():
    svg = line_plot([Series("first <one>", [(0, 0), (10, 50), (4, 20)]), Series("second", [(2, 35)], lines=False)],
                    title="T & t", x_label="N tasks", y_label="ms per task")
    root = ET.fromstring(svg)  # well-formed XML, labels escaped
    texts = [t.text for t in root.iterfind(".//s:text", NS)]
    assert "N tasks" in texts and "ms per task" in texts and "T & t" in texts
    assert [t.text for t in root.iterfind(".//s:g[@class='legend']/s:text", NS)] == ["first <one>", "second"]
    xt, yt = _ticks(root, "xtick"), _ticks(root, "ytick")
    assert yt[0] > yt[max(yt)]  # larger values higher up
    points = root.findall(".//s:circle[@class='point']", NS)
    assert len(points) == 4
    for c in points:  # each marker sits where the axes' ticks put its value
        assert float(c.get("cx")) == pytest.approx(_interp(xt, float(c.get("data-x"))), abs=0.02)
        assert float(c.get("cy")) == pytest.approx(_interp(yt, float(c.get("data-y"))), abs=0.02)
    assert len(root.findall(".//s:polyline", NS)) == 1  # the markers-only series has no line


def test_log_axis_puts_decades_equally_apart():
    root = ET.fromstring(line_plot([Series("a", [(10, 1), (100, 2), (10_000, 3)])], title="t", x_label="x",
                                   y_label="y", log_x=True))
    xt = _ticks(root, "xtick")
    assert sorted(xt) == [10, 100, 1000, 10_000]
    gaps = [xt[b] - xt[a] for a, b in ((10, 100), (100, 1000), (1000, 10_000))]
    assert max(gaps) - min(gaps) < 0.02
    cx = {float(c.get("data-x")): float(c.get("cx")) for c in root.iterfind(".//s:circle", NS)}
    assert cx[100] == pytest.approx(xt[100], abs=0.02)


def test_histogram_counts_every_sample_once_and_draws_one_outline_per_set():
    samples = [0.2, 0.21, 0.22, 1.0, 5.0, 5.0, 9.9]
    edges = svgplot.bin_edges(samples, 8, log=True)
    assert sum(svgplot.counts(samples, edges)) == len(samples)  # the largest sample is in the last bin
    root = ET.fromstring(histogram({"a": samples, "b": [0.3]}, title="lat", x_label="ms", bins=8, log_x=True))
    assert [p.get("data-series") for p in root.iterfind(".//s:polygon", NS)] == ["a", "b"]
    yt = _ticks(root, "ytick")
    top = min(float(xy.split(",")[1]) for xy in root.find(".//s:polygon", NS).get("points").split())
    assert top == pytest.approx(_interp(yt, max(svgplot.counts(samples, edges))), abs=0.02)


def test_nice_ticks_cover_the_range_in_round_steps():
    assert svgplot.nice_ticks(0, 61.5) == [0, 20, 40, 60, 80]
    assert svgplot.nice_ticks(8.2, 64.9) == [0, 20, 40, 60, 80]
    assert svgplot.nice_ticks(0, 1) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]


@pytest.mark.parametrize("script,data,svg", [
    ("scale_curve.py", "scale_curve.json", ["scale-curve.svg"]),
    ("mcp_latency.py", "mcp_latency.json", ["mcp-latency.svg"]),
    ("iccad13.py", "iccad13.json", ["iccad13.svg", "iccad13-pvb.svg"]),
])
def test_the_docs_plots_are_what_the_benchmarks_draw_from_the_recorded_figures(tmp_path, script, data, svg):
    out = tmp_path / svg[0]
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--svg-from",
                    str(ROOT / "docs/img/data" / data), "--svg", str(out)], check=True, timeout=120, cwd=tmp_path)
    for name in svg:
        assert (tmp_path / name).read_text() == (ROOT / "docs/img" / name).read_text(), f"docs/img/{name} is stale"


def test_iccad13_plot_shows_the_best_published_rows_of_the_same_convention():
    saved = json.loads((ROOT / "docs/img/data/iccad13.json").read_text())
    legend = [t.text for t in ET.fromstring((ROOT / "docs/img/iccad13.svg").read_text())
              .iterfind(".//s:g[@class='legend']/s:text", NS)]
    assert legend[0] == saved["label"]
    assert "LithoBench CurvMulti (published)" in legend  # the row the summary table compares against
    assert not any("curvyILT" in x for x in legend)  # its own evaluation: never compared


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading."""
    h = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return h.replace(" ", "-")


@pytest.mark.parametrize("page", ["benchmarks.md", "benchmarks-history.md"])
def test_every_link_and_image_of_the_benchmark_pages_resolves(page):
    text = (ROOT / "docs" / page).read_text()
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://")):
            continue
        path, _, frag = target.partition("#")
        file = (ROOT / "docs" / path) if path else ROOT / "docs" / page
        if not file.exists():
            broken.append(target)
            continue
        if frag:
            anchors = {_anchor(m) for m in re.findall(r"^#+ (.+)$", file.read_text(), re.M)}
            if frag not in anchors:
                broken.append(target)
    assert not broken


def test_benchmarks_page_is_a_reference_under_400_lines_opening_with_its_table_and_plots():
    text = (ROOT / "docs/benchmarks.md").read_text()
    assert len(text.splitlines()) < 400
    head = text[: text.index("## Per benchmark")]
    assert "## Summary" in head and "| what | dome | baseline, same run | date | machine |" in head
    for name in ("scale-curve.svg", "mcp-latency.svg", "iccad13.svg", "iccad13-pvb.svg"):
        assert f"(img/{name})" in text
