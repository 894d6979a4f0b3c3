"""In-run integration: with scheduling.integrate_during_run the canvas moves while
the run goes on (integration.batch), later waves start from the integration head,
and the finish stage only completes what is left and promotes."""
from __future__ import annotations

from pathlib import Path

from coordinator import runstate as rs
from coordinator.runloop.finish import integration_finish
from tests.runloop.conftest import cmd_task, run_queue, write_queue

IN_RUN = {"integrate_during_run": True, "integration_batch_size": 1, "max_parallel": 1,
          "rebase_waves_on_integration_head": True, "advance_baseline": {"after_layers": 1}}


def _seq(events, topic: str) -> list[int]:
    return [e.sequence for e in events if e.topic == topic]


def test_proposals_are_stacked_during_the_run_and_later_waves_start_from_the_head(
        git_repo: Path, ops_root: Path, ledger_env, tmp_path: Path) -> None:
    from tests.conftest import git
    tasks = [cmd_task("first", "echo 1 > one.txt"),
             cmd_task("second", "test -f one.txt && echo 2 > two.txt", ["first"]),
             cmd_task("third", "test -f two.txt && echo 3 > three.txt", ["second"])]
    q = write_queue(tmp_path, git_repo, tasks, scheduling=IN_RUN)
    _, out = run_queue(q, ops_root, ledger_env, sandbox="none", finish=integration_finish)
    assert out.status == "promoted", out
    ev = ledger_env[0].events(out.run_id)
    batches = [e for e in ev if e.topic == "integration.batch"]
    assert len(batches) == 3
    completed = _seq(ev, rs.TASK_COMPLETED)
    # the first batch is stacked and validated before the last task has finished
    assert batches[0].sequence < completed[-1]
    first_val = min(_seq(ev, "integration.validation_report"))
    assert first_val < completed[-1]
    waves = [e.payload for e in ev if e.topic == rs.WAVE_STARTED]
    assert waves[0]["base_source"] == "run_base"
    assert [w["base_source"] for w in waves[1:]] == ["integration_head", "integration_head"]
    checkpoints = [e.payload["commit"] for e in ev if e.topic == "integration.checkpoint"]
    assert waves[1]["base_ref"] == checkpoints[0] and waves[2]["base_ref"] == checkpoints[1]
    # one policy/requirements record for the whole run; the final plan is the last revision
    assert len(_seq(ev, "integration.policy")) == 1
    plans = [e.payload for e in ev if e.topic == "integration.stack_plan"]
    assert plans[-1]["revision"] == 4 and len(plans[-1]["ordered_proposals"]) == 3
    head = git(git_repo, "rev-parse", "refs/heads/dome/out")
    assert head == out.head
    for name, text in (("one.txt", "1"), ("two.txt", "2"), ("three.txt", "3")):
        assert git(git_repo, "show", f"{head}:{name}") == text


def test_in_run_integration_passes_dome_verify(git_repo: Path, ops_root: Path, ledger_env,
                                               tmp_path: Path) -> None:
    from coordinator.integration.verify import verify_run
    tasks = [cmd_task("left", "echo l > l.txt"), cmd_task("right", "echo r > r.txt"),
             cmd_task("after", "echo a > a.txt", ["left"])]
    q = write_queue(tmp_path, git_repo, tasks, scheduling={**IN_RUN, "max_parallel": 2,
                                                           "integration_batch_size": 2})
    _, out = run_queue(q, ops_root, ledger_env, sandbox="none", finish=integration_finish)
    assert out.status == "promoted", out
    res = verify_run(ledger_env[0], out.run_id, ledger_env[2], ops_root=ops_root)
    assert res.valid, [f.__dict__ for f in res.failures()]


def test_a_partial_run_integrated_during_the_run_is_named_partial_by_the_gate(
        git_repo: Path, ops_root: Path, ledger_env, tmp_path: Path) -> None:
    """if_tasks_fail: promote_rest with in-run integration: the tasks that did not land are known
    only at the finish, which hands them to the gate: it names them."""
    import json

    from coordinator.integration.verify import verify_run
    tasks = [cmd_task("good", "echo a > A.txt"), cmd_task("boom", "exit 3"),
             cmd_task("after", "echo c > C.txt", ["boom"])]
    q = write_queue(tmp_path, git_repo, tasks, if_tasks_fail="promote_rest",
                    scheduling={**IN_RUN, "max_parallel": 2, "default_max_attempts": 1})
    _, out = run_queue(q, ops_root, ledger_env, sandbox="none", finish=integration_finish)
    assert out.status == "promoted", out
    gate = json.loads((ops_root / "runs" / out.run_id / "gate" / "gate.decision.json").read_text())
    assert gate["passed"] is True and gate["partial"] is True
    assert gate["tasks_not_landed"] == [{"node_id": "after", "status": "blocked"},
                                        {"node_id": "boom", "status": "failed"}]
    res = verify_run(ledger_env[0], out.run_id, ledger_env[2], ops_root=ops_root)
    assert res.valid, [f.__dict__ for f in res.failures()]


def _dependent_pair_run(git_repo: Path, ops_root: Path, ledger_env, tmp_path: Path, rebase: bool):
    from coordinator.integration.verify import verify_run
    from tests.conftest import git
    tasks = [cmd_task("a", "echo a > a.txt"), cmd_task("b", "test -f a.txt && echo b > b.txt", ["a"])]
    sched = {"integrate_during_run": True, "integration_batch_size": 1, "max_parallel": 1,
             **({"rebase_waves_on_integration_head": True, "advance_baseline": {"after_layers": 1}}
                if rebase else {})}
    q = write_queue(tmp_path, git_repo, tasks, scheduling=sched)
    _, out = run_queue(q, ops_root, ledger_env, sandbox="none", finish=integration_finish)
    assert out.status == "promoted", out
    ev = ledger_env[0].events(out.run_id)
    assert not [e for e in ev if e.topic == "integration.proposal_rejected"]
    assert len([e for e in ev if e.topic == "integration.batch"]) == 2  # a, then b in a later batch
    head = git(git_repo, "rev-parse", "refs/heads/dome/out")
    assert git(git_repo, "show", f"{head}:a.txt") == "a" and git(git_repo, "show", f"{head}:b.txt") == "b"
    res = verify_run(ledger_env[0], out.run_id, ledger_env[2], ops_root=ops_root)
    assert res.valid, [f.__dict__ for f in res.failures()]
    return ev


def test_a_dependent_task_on_a_derived_base_lands_after_its_ancestor_was_batched(
        git_repo: Path, ops_root: Path, ledger_env, tmp_path: Path) -> None:
    """B depends on A and starts from a derived base (run base + A's proposal); A's proposal was
    integrated in an earlier batch, yet B's derived base is rebuilt from it and both land."""
    ev = _dependent_pair_run(git_repo, ops_root, ledger_env, tmp_path, rebase=False)
    assert [e for e in ev if e.topic == "task.base_derived"]


def test_a_dependent_task_lands_when_waves_start_from_the_integration_head(
        git_repo: Path, ops_root: Path, ledger_env, tmp_path: Path) -> None:
    _dependent_pair_run(git_repo, ops_root, ledger_env, tmp_path, rebase=True)
