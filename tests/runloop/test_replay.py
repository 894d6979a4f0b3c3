"""Replay: the one fold (coordinator.runstate) turns a run's ledger events into the state the
scheduler, `dome status` and the run projection read, and scheduling decisions recompute byte
for byte from it -- on a run made now and on ledgers of runs recorded by earlier builds."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator import runstate as rs
from coordinator.runloop.loop import make_decision
from coordinator.runstate import RunState, apply, fold
from coordinator.scheduler import SchedulerPolicy, statuses
from coordinator.workqueue import load_work_queue
from registry.canonical import canonical_json
from tests.runloop.conftest import cmd_task, run_queue, write_queue

# Ledgers of real runs (export form without the DSSE copy) and their work queues. Today's code
# must fold them to the decisions they recorded: a change to the fold or the scheduler that would
# make a stored run resume differently fails here.
RECORDED = Path(__file__).resolve().parent / "recorded"


def _recorded(name: str) -> tuple[list[dict], object]:
    d = RECORDED / name
    events = [json.loads(line) for line in (d / "events.jsonl").read_text().splitlines()]
    return events, load_work_queue(d / "work.queue.json").graph


@pytest.mark.parametrize("name", sorted(p.name for p in RECORDED.iterdir() if p.is_dir()))
def test_recorded_history_refolds_to_the_same_decisions(name: str) -> None:
    events, graph = _recorded(name)
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
    run_id, seed = events[0]["run_id"], events[0]["payload"]["determinism_seed"]
    decisions = [e for e in events if e["topic"] == rs.SCHEDULING_DECISION]
    assert len(decisions) >= 3
    for d in decisions:
        prefix = [e for e in events if e["sequence"] < d["sequence"]]
        again = make_decision(graph, fold(prefix), SchedulerPolicy(**d["payload"]["policy"]), seed, run_id)
        assert canonical_json(again) == canonical_json(d["payload"]), (name, d["sequence"])
    finished = events[-1]
    assert finished["topic"] == rs.RUN_FINISHED
    final = fold(events)
    status = statuses(graph, final)
    recorded = dict(finished["payload"]["counts"])
    assert final.total_attempts == recorded.pop("attempts")
    assert {k: sum(1 for v in status.values() if v == k) for k in recorded} == recorded
    assert make_decision(graph, final, SchedulerPolicy(**decisions[-1]["payload"]["policy"]), seed, run_id) is None


def test_recorded_failure_history_keeps_its_verdicts() -> None:
    events, graph = _recorded("failure")
    final = fold(events)
    assert final.node("broken").attempts == 2 and final.node("broken").failures == 2
    assert not final.node("broken").succeeded and final.node("a").succeeded_by
    assert statuses(graph, final) == {"a": "succeeded", "side": "succeeded", "broken": "failed",
                                      "after": "blocked"}


def _ev(seq: int, topic: str, node: str | None = None, neid: str | None = None, **payload) -> dict:
    return {"sequence": seq, "run_id": "r", "topic": topic, "node_id": node, "node_execution_id": neid,
            "payload": payload}


def test_late_and_duplicate_terminal_events_change_nothing() -> None:
    events = [_ev(1, rs.TASK_DISPATCHED, "n", "x"), _ev(2, rs.TASK_COMPLETED, "n", "x", outcome="succeeded"),
              _ev(3, rs.TASK_FAILED, "n", "x"), _ev(4, rs.TASK_COMPLETED, "n", "ghost", outcome="succeeded")]
    state = fold(events)
    assert state.node("n").succeeded_by == "x" and state.node("n").failures == 0
    assert state.ended == frozenset({"x"}) and "ghost" not in state.executions
    assert state.last_sequence == 4


_topics = st.sampled_from([rs.RUN_STARTED, rs.SCHEDULING_DECISION, rs.WAVE_STARTED, rs.TASK_DISPATCHED,
                           rs.TASK_PROGRESS, rs.TASK_COMPLETED, rs.TASK_FAILED, rs.TASK_TIMEOUT, rs.TASK_LOST,
                           rs.TASK_ACK, rs.PATCH_SUBMITTED, rs.RUN_FINISHED, "x.unknown"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_topics, st.sampled_from(["n1", "n2"]), st.sampled_from(["a", "b", "c"]),
                          st.sampled_from(["succeeded", "failed"])), max_size=40))
def test_fold_equals_the_run_loops_event_by_event_state(items) -> None:
    """The run loop applies each event as it appends it; --resume folds the stored events.
    Both must give the same state for any order of the real topics, and the fold never
    changes its input."""
    events = [_ev(i, t, n, x, outcome=o, node_execution_id=x) for i, (t, n, x, o) in enumerate(items, start=1)]
    snapshot = json.dumps(events, sort_keys=True)
    live = RunState()
    for e in events:
        live = apply(live, e)
    assert fold(events) == live == fold(list(events))
    assert json.dumps(events, sort_keys=True) == snapshot
    for nid, ns in live.nodes.items():
        assert ns.failures <= ns.attempts and set(ns.active) <= set(live.executions)


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


def test_resolver_spawns_and_baseline_advances_replay_from_the_ledger(git_repo, ops_root, ledger_env, tmp_path):
    """The canvas's decisions are folds of the ledger too: replaying the events before each
    `wave.started` gives its base (run base or integration head), and replaying the events
    before each `resolver.spawned` gives that spawn (conflict chain, request, try)."""
    from coordinator.runloop import resolver as rv
    from coordinator.runloop.baseline import CanvasPolicy, advance_to, fold_events
    from coordinator.runloop.finish import integration_finish
    from tests.conftest import git
    from tests.runloop.test_resolver import CHECK, LIB, PUNCTUATE, TYPED

    (git_repo / "lib.py").write_text(LIB)
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-q", "-m", "lib")
    sched = {"integrate_during_run": True, "integration_batch_size": 1, "max_parallel": 2,
             "endgame_max_duplicates": 0, "resolver_max_tries": 2, "rebase_waves_on_integration_head": True,
             "advance_baseline": {"after_layers": 1}}
    tasks = [cmd_task("punctuate", PUNCTUATE), cmd_task("typed", "sleep 1; " + TYPED),
             cmd_task("note", "echo ok > NOTE.txt", ["punctuate"])]
    q = write_queue(tmp_path, git_repo, tasks, validations=[CHECK], scheduling=sched)
    _, out = run_queue(q, ops_root, ledger_env, sandbox="none", finish=integration_finish)
    assert out.status == "promoted"
    events = ledger_env[0].events(out.run_id)
    policy = CanvasPolicy.from_scheduling(sched)
    waves = [e for e in events if e.topic == rs.WAVE_STARTED]
    spawns = [e for e in events if e.topic == "resolver.spawned"]
    assert spawns and any(w.payload["base_source"] == "integration_head" for w in waves)
    for w in waves:
        facts = fold_events([e for e in events if e.sequence < w.sequence])
        base = advance_to(facts, policy) or (facts.wave_base, facts.trees[facts.wave_base])
        assert (w.payload["base_ref"], w.payload["base_tree_hash"]) == base, w.sequence
    for s in spawns:
        facts = rv.fold_resolver_events([e for e in events if e.sequence < s.sequence])
        due = rv.to_spawn(facts, policy.resolver_max_tries)
        assert [(o, rv.request_key(r), t) for o, r, t in due] == \
            [(s.payload["origin"], s.payload["request"], s.payload["try"])], s.sequence
    # and nothing more is due once the run has finished
    final = rv.fold_resolver_events(events)
    assert rv.to_spawn(final, policy.resolver_max_tries) == []
    assert rv.exhausted_now(final, policy.resolver_max_tries) == []
