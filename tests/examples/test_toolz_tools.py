"""The toolz example end to end through the real CLI, on the default policy: a
real PyPI project (toolz 0.12.1, its own 180 tests), seventeen real tool workers
(pyupgrade per module, four overlapping `ruff check --fix` passes) and one bad
task. The bad task is ejected with its failing test named, the rest promoted,
`dome verify` accepts the run, and the report (rendered by Chromium) draws
every phase, lists every task and opens a diff."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, dome_cli, git
from tests.report.test_report_page import Page, rendered

EXAMPLE = REPO_ROOT / "examples" / "toolz-tools"
BAD_TEST = "toolz/tests/test_itertoolz.py::test_frequencies"


@pytest.fixture(scope="module")
def toolz_run(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("toolz")
    spec = importlib.util.spec_from_file_location("toolz_make_repo", EXAMPLE / "make_repo.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    repo = mod.make_repo(tmp / "repo")
    queue = json.loads((EXAMPLE / "work.queue.json").read_text())
    assert queue["policy"] == "default" and "domain" not in queue  # the default policy, its default preset
    queue["repo"] = str(repo)
    qfile = tmp / "work.queue.json"
    qfile.write_text(json.dumps(queue))
    ops = tmp / "ops"
    run = dome_cli("run", str(qfile), "--ops-root", str(ops), timeout=240)
    run_id = run.stdout.split()[1].rstrip(":") if run.stdout.startswith("run ") else ""
    ev = dome_cli("events", run_id, "--ops-root", str(ops), "--json")
    events = [json.loads(line) for line in ev.stdout.splitlines() if line.strip()]
    return {"tmp": tmp, "repo": repo, "queue": queue, "ops": ops, "run": run, "run_id": run_id, "events": events}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_tool_workers_on_a_pypi_project_promote_on_the_default_policy(toolz_run) -> None:
    run, repo, events = toolz_run["run"], toolz_run["repo"], toolz_run["events"]
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    assert out.startswith(f"run {toolz_run['run_id']}: promoted")
    done = {e["node_id"]: e["payload"] for e in events if e["topic"] == "task.completed"}
    assert set(done) == {t["node_id"] for t in toolz_run["queue"]["tasks"]}  # every task succeeded
    assert all(p["outcome"] == "succeeded" for p in done.values())
    no_change = {n for n, p in done.items() if (p.get("summary") or {}).get("no_change")}
    assert "ruff-c4" in no_change and len(no_change) >= 5
    assert (done["pyupgrade-functoolz"]["summary"]["exit_code"], done["ruff-c4"]["summary"]["exit_code"]) == (1, 1)
    # the risk rose (ruff's import sort touches setup.py, a dependency file) and the verdict says who, by which rule;
    # the passes leave the tests alone, so no proposal changes what judges it and no person is asked
    assert "policy preset: software" in out
    assert "risk medium: raised by ruff-i" in out and "dependency files setup.py" in out
    assert "held at the human gate" not in out
    gate = [e["payload"] for e in events if e["topic"] == "gate.computed"][-1]
    assert gate["passed"] and gate["required_suites"] == ["tests"]
    # the bad task is ejected, its failing test named with the first lines of its output
    node_of = {e["payload"]["proposal_id"]: e["payload"]["node_id"] for e in events
               if e["topic"] == "integration.proposal_verified"}
    ejected = [node_of[p] for e in events if e["topic"] == "integration.ejected" for p in e["payload"]["proposal_ids"]]
    assert ejected == ["bad-frequencies"]
    assert f"failing test {BAD_TEST}" in out and "AssertionError" in out
    # the promoted tree has every good change, not the bad one, and passes the project's own tests
    promoted = git(repo, "rev-parse", "refs/heads/modernized")
    work = toolz_run["tmp"] / "promoted"
    git(repo, "worktree", "add", "-q", str(work), promoted)
    assert "d[item] += 1" in (work / "toolz/itertoolz.py").read_text()
    assert git(repo, "diff", "--stat", "main", promoted)  # something landed
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "toolz/tests"],
                           cwd=work, capture_output=True, text=True, timeout=180)
    assert tests.returncode == 0 and "180 passed" in tests.stdout, tests.stdout[-2000:]
    verify = dome_cli("verify", toolz_run["run_id"], "--ops-root", str(toolz_run["ops"]))
    assert verify.returncode == 0 and "VALID" in verify.stdout, verify.stdout + verify.stderr
    assert "risk medium: raised by ruff-i" in verify.stdout and "dependency files setup.py" in verify.stdout


PROBE = """<script>
(function () {
  var svg = document.querySelector('svg[aria-label="wave timeline"]');
  var boxes = Array.prototype.map.call(svg.querySelectorAll('text'), function (t) {
    return t.getBoundingClientRect(); });
  var overlaps = 0;
  for (var i = 0; i < boxes.length; i++) for (var j = i + 1; j < boxes.length; j++) {
    var a = boxes[i], b = boxes[j];
    if (a.width && b.width && a.left < b.right - 0.5 && b.left < a.right - 0.5 &&
        a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5) overlaps++;
  }
  document.body.setAttribute('data-overlaps', String(overlaps));
  var d = document.querySelector('details.diff');
  var pre = d.querySelector('pre');
  var closed = d.getBoundingClientRect().height;
  d.open = true;
  document.body.setAttribute('data-diff', closed + ',' + d.getBoundingClientRect().height + ',' +
                             pre.textContent.split('\\n').length);
})();
</script></body>"""


def _attr(dom: str, name: str) -> str:
    i = dom.index(f'{name}="') + len(name) + 2
    return dom[i:dom.index('"', i)]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_report_of_that_run_in_chromium(toolz_run) -> None:
    assert toolz_run["run"].returncode == 0, toolz_run["run"].stdout[-2000:]
    html = toolz_run["tmp"] / "report.html"
    rep = dome_cli("report", toolz_run["run_id"], "--ops-root", str(toolz_run["ops"]), "--html", str(html))
    assert rep.returncode == 0, rep.stderr
    for width in (760,):  # SVG text scales with its picture: overlaps do not depend on the width
        dom = rendered(html, width, toolz_run["tmp"], PROBE)
        assert _attr(dom, "data-overlaps") == "0", f"overlapping labels at {width} px"
        closed, opened, lines = (float(x) for x in _attr(dom, "data-diff").split(","))
        assert closed < 30 and opened > closed + 40 and lines > 3, "a folded diff opens and shows its lines"
    page = Page(dom)
    # timeline phases: the tasks, integration, each validation and the bisection on one axis
    timeline = next(t for t in page.svg_texts if "integration" in t)
    tasks = [t["node_id"] for t in toolz_run["queue"]["tasks"]]
    assert set(tasks) <= set(timeline)
    assert {"integration", "validate: tests", "bisect: tests"} <= set(timeline)
    # every task listed with its outcome, the ones that changed nothing included
    rows = {r[0]: r[1] for r in page.tables["Tasks"][1:]}
    assert set(rows) == set(tasks)
    assert rows["ruff-c4"] == "no change" and rows["bad-frequencies"] == "changed"
    # the ejected task and its failing test, in the report
    assert BAD_TEST in dom and "risk medium: raised by ruff-i" in dom
    # full file lists: ruff-i's 15 files are all there, folded
    ruff_i = next(r for r in page.tables["Proposals"][1:] if r[0] == "ruff-i")
    assert "15 file(s)" in ruff_i[3] and "setup.py" in ruff_i[3]
    # a split says which files landed
    split = [r for r in page.tables["Proposals"][1:] if r[2] == "split"]
    assert split and all(" landed" in r[3] and "(landed)" in r[3] for r in split)
