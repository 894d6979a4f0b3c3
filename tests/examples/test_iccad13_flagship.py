"""The main job end to end: ILT + DRC on ICCAD 2013 clips through `dome run`.

Runs the quick flagship queue on a freshly made example repository with the
real sandboxed executor, then checks promotion, the promoted masks, the
re-simulation evidence, `dome verify`, and the HTML report as a browser shows it.
"""
from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, dome_cli, git

# the module fixture runs the whole flagship (up to 25 min on 2 busy cores), then the report
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2700)]



def _make_repo_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("iccad13_make_repo", REPO_ROOT / "examples" / "iccad13" / "make_repo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def flagship(tmp_path_factory: pytest.TempPathFactory, iccad13: Path) -> dict:
    make_repo = _make_repo_module()
    base = tmp_path_factory.mktemp("flagship")
    repo = make_repo.make_repo(base / "repo", iccad13)
    queue = json.loads((REPO_ROOT / "examples" / "iccad13" / "work.quick.json").read_text())
    queue["repo"] = str(repo)
    qfile = base / "work.quick.json"
    qfile.write_text(json.dumps(queue))
    ops = base / "ops"
    r = dome_cli("run", str(qfile), "--ops-root", str(ops), "--json", timeout=1500)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return {"repo": repo, "ops": ops, "queue": queue, "run": out, "stderr": r.stderr, "base": base}


def _events(f: dict, topic: str) -> list[dict]:
    lines = dome_cli("events", f["run"]["run_id"], "--ops-root", str(f["ops"]), "--json").stdout.splitlines()
    return [e for e in map(json.loads, lines) if e["topic"] == topic]


def test_the_quick_flagship_is_promoted_with_every_mask(flagship: dict) -> None:
    run = flagship["run"]
    assert run["status"] == "promoted", flagship["stderr"][-3000:]
    ref = flagship["queue"]["promote_to"]
    head = git(flagship["repo"], "rev-parse", ref)
    assert head == run["head"]
    files = set(git(flagship["repo"], "ls-tree", "-r", "--name-only", ref).splitlines())
    clips = [t["action_spec"]["params"]["out"] for t in flagship["queue"]["tasks"]
             if t["action_spec"]["intent"] == "litho.optimize"]
    for mask in clips:
        assert mask in files
        assert mask.replace(".oas", ".litho.json") in files


def test_resimulation_reproduced_every_claimed_metric(flagship: dict) -> None:
    reports = [e["payload"] for e in _events(flagship, "integration.validation_report")
               if e["payload"].get("suite") == "litho_resim" and e["payload"].get("head_ref") == flagship["run"]["head"]]
    assert reports and reports[-1]["result"] == "passed"
    checks = reports[-1]["summary"]["evidence"][0]["checks"]
    assert len(checks) == 4  # each mask's report: its mask's figures, and its target's ("before")
    assert sum("target" in c for c in checks) == 2
    for c in checks:
        assert c["passed"] and c["got"] == c["expected"]
    drc = [e["payload"] for e in _events(flagship, "task.completed") if e["node_id"].startswith("drc-")]
    assert len(drc) == 2 and all(p["summary"]["marker_count"] == 0 for p in drc)


def test_dome_verify_passes(flagship: dict) -> None:
    r = dome_cli("verify", flagship["run"]["run_id"], "--ops-root", str(flagship["ops"]), "--json")
    assert r.returncode == 0, r.stdout[-2000:]


def _png_is_not_blank(data: bytes) -> bool:
    from PIL import Image, ImageStat

    img = Image.open(io.BytesIO(data)).convert("L")
    return max(ImageStat.Stat(img).stddev) > 1.0


def test_report_has_nonblank_pictures_and_renders_in_chromium(flagship: dict) -> None:
    html = flagship["base"] / "report.html"
    r = dome_cli("report", flagship["run"]["run_id"], "--ops-root", str(flagship["ops"]), "--html", str(html),
                 timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    text = html.read_text()
    assert "promoted" in text and "<svg" in text
    assert "curvyILT" in text or "CurvMulti" in text  # published results beside ours
    pictures = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([^"]+)"', text)
    names = {alt for alt, _ in pictures}
    for clip in ("M1_test1", "M1_test4"):
        for role in ("target", "optimized mask", "print, nominal", "print, max dose", "print, min (defocus)",
                     "EPE violations"):
            assert f"{clip} {role}" in names
    assert all(_png_is_not_blank(base64.b64decode(b64)) for _, b64 in pictures)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("Debian chromium is required for the report test (scripts/setup.sh installs it)")
    shot = flagship["base"] / "report.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={flagship['base'] / 'chromium'}", f"--screenshot={shot}",
                    "--window-size=1200,3000", html.as_uri()], capture_output=True, timeout=120)
    assert shot.is_file() and _png_is_not_blank(shot.read_bytes())


def test_litho_report_page_says_what_the_ledger_says(flagship: dict, tmp_path: Path) -> None:
    """The page Chromium renders at 760 px and at phone width fits, and its
    per-clip metrics, DRC rows and quick-schedule note match the ledger."""
    from tests.report.test_report_page import Page, check_page, rendered

    html = tmp_path / "report.html"
    r = dome_cli("report", flagship["run"]["run_id"], "--ops-root", str(flagship["ops"]), "--html", str(html),
                 "--no-pictures", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    page, events = check_page(html, flagship["ops"], flagship["run"]["run_id"], tmp_path)
    page = Page(rendered(html, 760, tmp_path))
    drc = {e["node_id"]: e["payload"]["summary"] for e in events
           if e["topic"] == "task.completed" and "rule_counts" in (e["payload"].get("summary") or {})}
    table = page.tables["Mask rules (DRC) per mask"]
    rows = {r[0]: r for r in table[1:] if len(r) == 5}  # the per-task table (per-mask tables follow it)
    assert set(rows) == set(drc)
    for node, summary in drc.items():
        assert rows[node][1] == summary["layout"] and int(rows[node][3]) == summary["marker_count"]
        # a mask with markers gets its own block (counts by rule, close-ups); a clean one none
        heading = f"<h3>{summary['layout']}: {summary['marker_count']} marker(s)</h3>"
        assert (heading in html.read_text()) == (summary["marker_count"] > 0)
    metrics = [item["metrics"] for e in events if e["topic"] == "task.completed"
               for item in e["payload"].get("evidence") or [] if item.get("kind") == "litho.optimize"]
    ours = [r for r in page.tables["Lithography: per-clip results"] if r and r[0] == "dome (this run)"]
    assert sorted(float(r[1]) for r in ours) == sorted(float(m["l2_nm2"]) for m in metrics)
    mean = [r for r in page.tables["Lithography: per-clip results"] if r and r[0].startswith("dome, mean of")][0]
    assert mean[1] == f"{sum(float(m['l2_nm2']) for m in metrics) / len(metrics):,.0f}"
    iters = {t["action_spec"]["params"].get("iterations") for t in flagship["queue"]["tasks"]
             if t["action_spec"]["intent"] == "litho.optimize"}
    assert ("Quick schedule" in html.read_text()) == any(iters)
