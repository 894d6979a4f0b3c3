"""The live run page of `dome serve`, in headless Chromium, during a real `dome run`: it
changes without a reload until the verdict, and every row it shows is what the ledger says."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.observe.cdp import Chromium
from tests.observe.helpers import TOKEN, dome_serve, start_run, wait_until
from tests.report.test_report_page import Page, expected_fates, ledger_events
from tests.runloop.conftest import cmd_task, write_queue

SHOT = os.environ.get("DOME_SCREENSHOT")  # a path: also save the page as PNG (docs/live-page.png)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_live_page_follows_a_run_and_matches_the_ledger(git_repo, ops_root, tmp_path: Path) -> None:
    from ledger import Ledger

    q = write_queue(tmp_path, git_repo, [cmd_task("first", "sleep 2; echo 1 > one.txt"),
                                         cmd_task("second", "sleep 2; echo 2 > two.txt", ["first"]),
                                         cmd_task("third", "echo 3 > three.txt", ["second"])],
                    scheduling={"endgame_max_duplicates": 0})
    with dome_serve(ops_root) as serve:
        run = start_run(q, ops_root)
        ledger = Ledger.open(None, ops_root)
        run_id = wait_until(lambda: (ledger.run_ids() or [None])[0], 60, "the run to start")
        browser = Chromium(tmp_path / "profile")
        try:
            browser.navigate(f"{serve}/login?token={TOKEN}")  # sets the cookie; EventSource has no header
            browser.navigate(f"{serve}/runs/{run_id}")
            loaded = browser.eval("document.body.getAttribute('data-loaded')")
            first_seq = int(browser.eval("document.getElementById('live').getAttribute('data-seq')"))
            assert browser.eval("document.getElementById('live').getAttribute('data-status')") == "running"
            seen = [first_seq]
            deadline = time.monotonic() + 120
            while browser.eval("document.body.getAttribute('data-final')") != "1":
                assert time.monotonic() < deadline, "the page never showed the verdict"
                seq = int(browser.eval("document.getElementById('live').getAttribute('data-seq')"))
                if seq != seen[-1]:
                    seen.append(seq)
                time.sleep(0.2)
            seen.append(int(browser.eval("document.getElementById('live').getAttribute('data-seq')")))
            # it changed in place: several updates, the same document (no reload)
            assert browser.eval("document.body.getAttribute('data-loaded')") == loaded
            assert int(browser.eval("document.body.getAttribute('data-updates')")) >= 2
            assert len(set(seen)) >= 3 and seen == sorted(seen)
            dom = browser.eval("document.documentElement.outerHTML")
            if SHOT:
                browser.screenshot(Path(SHOT))
            browser.navigate(f"{serve}/")
            runs_dom = browser.eval("document.documentElement.outerHTML")
        finally:
            browser.close()
            out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err[-3000:]
    events = ledger_events(ops_root, run_id)
    assert seen[-1] == events[-1]["sequence"]  # the page reached the ledger's last event
    finished = [e for e in events if e["topic"] == "run.finished"][-1]["payload"]
    page = Page(dom)
    assert page.verdict == finished["status"] == "promoted"
    assert page.proposal_status == expected_fates(events)
    # the integration rows are the ledger's integration decisions, in its order
    seqs = [int(r[0]) for r in page.tables["Integration"][1:]]
    assert seqs == sorted(seqs)
    for topic in ("integration.apply_result", "integration.validation_report", "gate.computed", "promotion.computed"):
        assert {e["sequence"] for e in events if e["topic"] == topic} <= set(seqs), topic
    reports = [e["payload"] for e in events if e["topic"] == "integration.validation_report"]
    assert [(r[1], r[2], r[3]) for r in page.tables["Validations"][1:]] == [
        (v["phase"], v["suite"], "pass" if v["passed"] else "FAIL") for v in reports]
    gate = [e["payload"] for e in events if e["topic"] == "gate.computed"][-1]
    assert [r[0] for r in page.tables["Evidence chain"][1:]] == [link["link"] for link in gate["links"]]
    timeline = next(t for t in page.svg_texts if "first" in t)
    assert [t for t in timeline if t in ("first", "second", "third")] == ["first", "second", "third"]
    runs = Page(runs_dom).tables["dome runs"] if "dome runs" in Page(runs_dom).tables else Page(runs_dom).tables[""]
    assert [(r[0], r[1]) for r in runs[1:]] == [(run_id, "promoted")]
