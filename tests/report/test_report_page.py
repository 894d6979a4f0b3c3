"""The report page, as headless Chromium renders it, says what the ledger says.

Two real runs through the real CLI: the agent-swarm example (work that is
applied, split, dropped and ejected by bisect) and a run blocked because its
target branch moved. For each, the page is rendered by Chromium at 760 px and
at phone width, and what the rendered page states is compared with what the
ledger records, read independently of the report code."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, dome_cli

MEASURE = """<script>
document.body.setAttribute('data-overflow',
  String(document.documentElement.scrollWidth - window.innerWidth));
</script></body>"""


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("Debian chromium is required for the report page test (scripts/setup.sh installs it)")
    return exe


def rendered(html_file: Path, width: int, tmp: Path, script: str = MEASURE) -> str:
    """The DOM Chromium builds from the page at `width` px, after `script` (ending
    the body) ran: by default the page's horizontal overflow measured in
    `data-overflow` on <body>."""
    probe = tmp / f"probe-{width}.html"
    probe.write_text(html_file.read_text().replace("</body>", script, 1))
    res = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--disable-quic", f"--user-data-dir={tmp / 'chromium'}", f"--window-size={width},1200",
                          "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "<body" in res.stdout, res.stderr[-2000:]
    return res.stdout


class Page(HTMLParser):
    """What a reader sees: proposal rows and their status, validation and
    integration rows, the verdict badge, texts inside the SVG pictures."""

    def __init__(self, dom: str) -> None:
        super().__init__()
        self.overflow: int | None = None
        self.tables: dict[str, list[list[str]]] = {}
        self.proposal_status: dict[str, str] = {}
        self.svg_texts: list[list[str]] = []
        self.verdict = ""
        self._h2 = ""
        self._in: list[str] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._proposal: str | None = None
        self._status_cell = False
        self._text: list[str] | None = None
        self._svg: list[str] | None = None
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self._in.append(tag)
        if tag == "body" and "data-overflow" in a:
            self.overflow = int(a["data-overflow"])
        elif tag == "h2":
            self._text = []
        elif tag == "tr":
            self._row, self._proposal = [], a.get("data-proposal")
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
            self._status_cell = a.get("class") == "status"
        elif tag == "svg":
            self._svg = []
        elif tag == "text" and self._svg is not None:
            self._text = []
        elif tag == "p" and a.get("id") == "verdict":
            self._text = []

    def handle_endtag(self, tag):
        if self._in:
            self._in.pop()
        if tag == "h2" and self._text is not None:
            self._h2, self._text = "".join(self._text).strip(), None
        elif tag in ("td", "th") and self._cell is not None and self._row is not None:
            cell = " ".join("".join(self._cell).split())
            self._row.append(cell)
            if self._status_cell and self._proposal:
                self.proposal_status[self._proposal] = cell
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables.setdefault(self._h2, []).append(self._row)
            self._row = None
        elif tag == "text" and self._svg is not None and self._text is not None:
            self._svg.append("".join(self._text))
            self._text = None
        elif tag == "svg" and self._svg is not None:
            self.svg_texts.append(self._svg)
            self._svg = None
        elif tag == "p" and self._text is not None and not self.verdict and self._h2 == "":
            self.verdict, self._text = "".join(self._text).strip(), None

    def handle_data(self, data):
        for buf in (self._cell, self._text):
            if buf is not None:
                buf.append(data)


def ledger_events(ops: Path, run_id: str) -> list[dict]:
    ev = dome_cli("events", run_id, "--ops-root", str(ops), "--json")
    assert ev.returncode == 0, ev.stderr
    return [json.loads(line) for line in ev.stdout.splitlines()]


def expected_fates(events: list[dict]) -> dict[str, str]:
    """Each submitted proposal's fate, straight from the ledger records."""
    by = lambda t: [e["payload"] for e in events if e["topic"] == t]  # noqa: E731
    submitted = [p["proposal_id"] for p in by("patch.submitted")]
    ejected = {pid for p in by("integration.ejected") for pid in p["proposal_ids"]}
    split = {p["proposal_id"] for p in by("integration.split_result")}
    dropped = {p["proposal_id"] for p in by("integration.apply_result")
               if not p["applied"] and p.get("decision") == "drop"}
    promos = by("promotion.computed")
    included = set(promos[-1]["included_proposals"]) if promos else set()
    out = {}
    for pid in submitted:
        out[pid] = ("ejected" if pid in ejected else "split" if pid in split else
                    "dropped" if pid in dropped else "applied" if pid in included else "?")
    return out


def check_page(html_file: Path, ops: Path, run_id: str, tmp: Path) -> tuple[Page, list[dict]]:
    events = ledger_events(ops, run_id)
    finished = [e for e in events if e["topic"] == "run.finished"][-1]["payload"]
    for width in (760, 390):  # a laptop window beside a terminal, a phone
        page = Page(rendered(html_file, width, tmp))
        assert page.overflow is not None and page.overflow <= 0, f"page wider than {width} px by {page.overflow}"
    assert page.verdict == finished["status"]
    # every proposal, with the status the ledger gives it
    want = expected_fates(events)
    assert page.proposal_status == want
    # validations in ledger order, with their phase and result
    reports = [e["payload"] for e in events if e["topic"] == "integration.validation_report"]
    rows = page.tables["Validations"][1:]
    assert [(r[1], r[2], r[3]) for r in rows] == [
        (v["phase"], v["suite"], "pass" if v["passed"] else "FAIL") for v in reports]
    # the integration section lists the decisions in the order the ledger recorded them
    seqs = [int(r[0]) for r in page.tables["Integration"][1:]]
    assert seqs == sorted(seqs)
    for topic in ("integration.conflict_decision", "integration.bisect", "integration.ejected",
                  "integration.validation_report", "gate.computed", "promotion.computed"):
        assert {e["sequence"] for e in events if e["topic"] == topic} <= set(seqs), topic
    # timeline rows in the order tasks first started
    first_start: list[str] = []
    for e in events:
        if e["topic"] == "task.dispatched" and e["node_id"] not in first_start:
            first_start.append(e["node_id"])
    timeline = next(t for t in page.svg_texts if first_start[0] in t)
    assert [t for t in timeline if t in first_start] == first_start
    return page, events


@pytest.mark.slow
def test_agent_swarm_page_states_what_landed(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("swarm_make_repo", REPO_ROOT / "examples/agent-swarm/make_repo.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    repo = mod.make_repo(tmp_path / "repo")
    queue = json.loads((REPO_ROOT / "examples/agent-swarm/work.queue.json").read_text())
    queue["repo"] = str(repo)
    qfile = tmp_path / "work.queue.json"
    qfile.write_text(json.dumps(queue))
    ops = tmp_path / "ops"
    run = dome_cli("run", str(qfile), "--ops-root", str(ops), "--json", timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    run_id = json.loads(run.stdout)["run_id"]
    html = tmp_path / "report.html"
    rep = dome_cli("report", run_id, "--ops-root", str(ops), "--html", str(html))
    assert rep.returncode == 0, rep.stderr
    assert "dome report: writing the page" in rep.stderr  # progress while it renders
    page, events = check_page(html, ops, run_id, tmp_path)
    fates = sorted(page.proposal_status.values())
    assert fates.count("applied") == 3 and {"split", "dropped", "ejected"} <= set(fates)  # green only for what landed
    node_of = {e["payload"]["proposal_id"]: e["node_id"] for e in events if e["topic"] == "patch.submitted"}
    rows = {r[0]: r for r in page.tables["Proposals"][1:]}
    ejected = [node_of[p] for p, s in page.proposal_status.items() if s == "ejected"]
    assert ejected and "failing suite: tests" in rows[ejected[0]][5]
    dropped = [node_of[p] for p, s in page.proposal_status.items() if s == "dropped"][0]
    assert "conflicts with " in rows[dropped][5] and "hunk" in rows[dropped][5]
    split = [node_of[p] for p, s in page.proposal_status.items() if s == "split"][0]
    assert f"parts: {split} (part a), {split} (part b)" in rows[split][5]
    assert any(r[1] == "bisect" for r in page.tables["Validations"][1:])


@pytest.mark.slow
def test_blocked_run_page_never_shows_the_gate_passed(tmp_path: Path) -> None:
    from tests.runloop.test_run_explains import run_with_target_moved_midway

    run, repo, ops = run_with_target_moved_midway(tmp_path)
    assert run.returncode == 4, run.stderr[-3000:]
    run_id = json.loads(run.stdout)["run_id"]
    html = tmp_path / "report.html"
    assert dome_cli("report", run_id, "--ops-root", str(ops), "--html", str(html)).returncode == 0
    page, events = check_page(html, ops, run_id, tmp_path)
    assert page.verdict == "blocked"
    chain = next(t for t in page.svg_texts if "GateDecision" in t)
    gate_status = chain[chain.index("gate") + 1]
    assert gate_status != "passed" and gate_status == "blocked"
    promo = [e["payload"] for e in events if e["topic"] == "promotion.computed"][-1]
    assert promo["outcome"] == "blocked"
    assert chain[chain.index("refs/heads/target") + 1] == "invalid"  # the moved target, as a failing link
    why = html.read_text()
    assert "target:refs/heads/target" in why and "moved since the base" in why
