"""Scheduling decisions replay byte for byte from a recorded ledger."""
from __future__ import annotations

from coordinator import runstate as rs
from coordinator.runloop.loop import make_decision
from coordinator.runstate import fold
from coordinator.scheduler import SchedulerPolicy
from coordinator.workqueue import load_work_queue
from registry.canonical import canonical_json
from tests.runloop.conftest import cmd_task, run_queue, write_queue


def test_recorded_ledger_replays_to_identical_decisions(git_repo, ops_root, ledger_env, tmp_path):
    ledger = ledger_env[0]
    tasks = [cmd_task("root", "echo r > r.txt"),
             cmd_task("left", "echo l > l.txt", ["root"]), cmd_task("right", "echo x > x.txt", ["root"]),
             cmd_task("flaky", '[ "$DOME_ATTEMPT" -ge 2 ] || exit 1; echo f > f.txt', ["left"], max_attempts=3),
             cmd_task("join", "echo j > j.txt", ["left", "right", "flaky"], priority_group=1)]
    q = write_queue(tmp_path, git_repo, tasks, scheduling={"max_parallel": 2})
    _, out = run_queue(q, ops_root, ledger_env, sandbox="none")
    assert out.status == "completed"
    events = ledger.events(out.run_id)
    graph = load_work_queue(q).graph
    seed = events[0].payload["determinism_seed"]
    decisions = [e for e in events if e.topic == rs.SCHEDULING_DECISION]
    assert len(decisions) >= 4
    for d in decisions:
        prefix = [e for e in events if e.sequence < d.sequence]
        policy = SchedulerPolicy(**d.payload["policy"])
        again = make_decision(graph, fold(prefix), policy, seed, out.run_id)
        assert canonical_json(again) == canonical_json(d.payload), d.sequence
    # and a different seed or ledger prefix would not silently match
    first = decisions[0]
    assert make_decision(graph, fold([events[0]]), SchedulerPolicy(**first.payload["policy"]), seed + 1,
                         out.run_id) != first.payload


def test_new_wave_may_take_the_integration_head_as_base(git_repo, ops_root, ledger_env, tmp_path):
    from tests.conftest import git
    (git_repo / "canvas.txt").write_text("integrated layer\n")
    git(git_repo, "checkout", "-q", "-b", "canvas")
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-q", "-m", "integration head")
    head = git(git_repo, "rev-parse", "HEAD"), git(git_repo, "rev-parse", "HEAD^{tree}")
    git(git_repo, "checkout", "-q", "main")
    calls = []

    def wave_base(loop):
        calls.append(loop.writer.state.waves)
        return head if loop.writer.state.node("first").succeeded else None

    tasks = [cmd_task("first", "echo 1 > one.txt"), cmd_task("second", "test -f canvas.txt && echo 2 > two.txt",
                                                             ["first"])]
    q = write_queue(tmp_path, git_repo, tasks, scheduling={"rebase_waves_on_integration_head": True,
                                                           "endgame_max_duplicates": 0})
    _, out = run_queue(q, ops_root, ledger_env, sandbox="none", wave_base=wave_base)
    assert out.status == "completed" and calls
    waves = [e.payload for e in ledger_env[0].events(out.run_id) if e.topic == rs.WAVE_STARTED]
    assert waves[0]["base_source"] == "run_base" and waves[-1]["base_source"] == "integration_head"
    assert waves[-1]["base_ref"] == head[0]
