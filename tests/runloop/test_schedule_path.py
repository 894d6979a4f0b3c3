"""The run loop keeps what start-up made out of the cyclic collector's full passes while
it runs (gc.freeze) and collects the young generation less often; it hands both back
when the run ends, whatever the outcome."""
from __future__ import annotations

import gc
from pathlib import Path

from coordinator.runloop.contracts import default_finish
from coordinator.runloop.loop import GC_YOUNG_THRESHOLD
from tests.runloop.conftest import cmd_task, run_queue, write_queue


def test_start_up_objects_are_frozen_during_the_run_and_given_back_after(git_repo: Path, ops_root: Path,
                                                                         ledger_env) -> None:
    gc.unfreeze()
    before = gc.get_threshold()
    seen: list[int] = []
    during: list[tuple] = []

    def finish(fc):  # runs inside the loop's drive
        seen.append(gc.get_freeze_count())
        during.append(gc.get_threshold())
        return default_finish(fc)

    q = write_queue(ops_root, git_repo, [cmd_task("a", "echo a > a.txt"), cmd_task("b", "echo b > b.txt", deps=["a"])])
    loop, out = run_queue(q, ops_root, ledger_env, sandbox="none", finish=finish)
    assert out.status == "completed", out
    assert seen and seen[0] > 1000  # the modules, registry and graph start-up loaded
    assert gc.get_freeze_count() == 0  # given back: a later run in this process starts clean
    assert during[0][0] >= GC_YOUNG_THRESHOLD and gc.get_threshold() == before  # the process's own settings back


def test_a_failing_run_gives_the_frozen_objects_back(git_repo: Path, ops_root: Path, ledger_env) -> None:
    gc.unfreeze()

    def finish(fc):
        raise RuntimeError("the finish stage broke")

    q = write_queue(ops_root, git_repo, [cmd_task("a", "echo a > a.txt")])
    before = gc.get_threshold()
    try:
        run_queue(q, ops_root, ledger_env, sandbox="none", finish=finish)
    except RuntimeError:
        pass
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before
