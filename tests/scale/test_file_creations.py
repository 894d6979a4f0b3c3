"""The coordinator's file creations per task, counted by an audit hook in a real run
(`benchmarks/file_creations.py`): each attempt of the local executor costs it one file (its
log), the blob store makes at most its sixteen fan-out directories, and nothing is opened with O_CREAT
when it exists already."""
from __future__ import annotations

import pytest

from benchmarks.file_creations import _in_fresh_process
from tests.conftest import REPO_ROOT


@pytest.mark.slow
def test_a_runs_file_creations_per_task_are_bounded() -> None:
    n = 12
    r = _in_fresh_process(n, "none", REPO_ROOT)
    assert r["status"] == "promoted", r
    site = r["by_site"]
    attempt = sum(v for k, v in site.items() if k.split()[1].startswith(("coordinator/executors/attempts.py:write",
                                                                         "coordinator/executors/local.py")))
    # one attempt per task: its one log (the spawn spec, task facts and key are in memory);
    # before: 3 directories and 5 files
    assert attempt <= 1.01, site
    assert site.get("dir coordinator/executors/local.py:_popen", 0) == 0  # no logs/ folder
    assert site.get("dir ledger/blobs.py:put", 0) <= 18 / n + 0.01, site  # blobs/, sha256/, 16 fan-out dirs
    # the export: one file per event plus the task files, two folders per task (the layout)
    assert site.get("dir coordinator/runloop/export.py:_write_all", 0) <= 2 + 2 / n, site
    assert r["ocreat_on_existing"] == {}, r["ocreat_on_existing"]
    # in all: one file per event, 3 task files and 2 folders, the attempt's log, ~1.2 blobs, and
    # what the run makes once (its folders, keys, the integration worktree), over n
    assert r["per_task"] <= r["events_per_task"] + 7.5 + 40 / n, r


@pytest.mark.slow
def test_an_ops_root_with_blobs_of_the_earlier_layout_still_verifies(git_repo, ops_root, ledger_env, tmp_path) -> None:
    """A store written before the sixteen-directory layout (sha256/<hex[:2]>/<hex>): its run verifies, its
    blobs are read where they are, and new blobs go to the new layout beside them."""
    from coordinator.integration.verify import verify_run
    from coordinator.runloop.finish import integration_finish
    from tests.runloop.conftest import cmd_task, run_queue, write_queue

    ledger, _, keyring = ledger_env
    q = write_queue(tmp_path, git_repo, [cmd_task(f"t{i}", f"echo {i} > f{i}.txt") for i in range(3)],
                    scheduling={"max_parallel": 3, "endgame_max_duplicates": 0})
    _, out = run_queue(q, ops_root, ledger_env, sandbox="none", finish=integration_finish)
    assert out.status == "promoted", out
    store = ops_root / "blobs" / "sha256"
    moved = []
    for blob in [p for p in store.rglob("*") if p.is_file()]:  # back to the layout of before
        old = store / blob.name[:2] / blob.name
        old.parent.mkdir(exist_ok=True)
        blob.rename(old)
        moved.append(blob.name)
    for d in [d for d in store.iterdir() if len(d.name) == 1]:
        d.rmdir()
    assert len(moved) >= 3 and all(len(d.name) == 2 for d in store.iterdir())
    rep = verify_run(ledger, out.run_id, keyring, ops_root=ops_root)
    assert rep.valid, rep
    for name in moved:
        assert ledger.blobs.get("sha256:" + name) and ledger.blobs.path("sha256:" + name).parent.name == name[:2]
    new = ledger.blobs.put(b"written after the layout changed")
    assert ledger.blobs.path(new).parent.name == new[7]
