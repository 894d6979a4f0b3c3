"""A command task that asks for it (`on_conflict: "rerun"`) gets a conflict of its proposal
settled by running its command again on the integration head: a resolver attempt with its own
grant and node_execution_id, whose proposal carries coordinator-written provenance (`resolves`)
and is stacked and validated like any other. It works in the finish stage (no in-run
integration) and during the run; without the field a conflict drops the proposal as before; a
rerun that fails (or whose proposal does not land) spends its try and the drop says why."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coordinator.runloop import resolver as rv
from coordinator.runloop.finish import integration_finish
from coordinator.workgraph import build_graph
from tests.conftest import dome_cli, git
from tests.runloop.conftest import cmd_task, run_queue, write_queue

# Both tools rewrite list.txt from what the checkout holds (append a word, sort the file): the
# two proposals touch the same lines, and running either again on the other's result settles it.
LIST = "cherry\nmango\n"
SORTED = {"suite": "command", "name": "tests", "argv": ["sort", "-c", "list.txt"]}
FAILS_AS_RERUN = '[ -z "$DOME_RESOLVE" ] || exit 3; '


def _add(word: str) -> str:
    return f"echo {word} >> list.txt && sort -o list.txt list.txt"


def _repo(git_repo: Path) -> Path:
    (git_repo / "list.txt").write_text(LIST)
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-q", "-m", "list")
    return git_repo


def _tasks(prefix: str = "", *, wait: bool = False, **extra: Any) -> list[dict[str, Any]]:
    # with wait, banana ends a second later: during the run, apple lands first and banana conflicts
    return [cmd_task("apple", prefix + _add("apple"), **extra),
            cmd_task("banana", prefix + ("sleep 1; " if wait else "") + _add("banana"), **extra)]


def _in_process(git_repo, ops_root, ledger_env, tmp_path, tasks, **sched):
    q = write_queue(tmp_path, _repo(git_repo), tasks, validations=[SORTED],
                    scheduling={"max_parallel": 2, "endgame_max_duplicates": 0, **sched})
    _, out = run_queue(q, ops_root, ledger_env, sandbox="none", finish=integration_finish)
    return out, ledger_env[0].events(out.run_id)


def _assert_settled_by_a_rerun(repo: Path, head: str, ev: list[Any]) -> None:
    """Both tasks' words on the head; exactly one conflict, settled by one rerun of its own task."""
    assert git(repo, "show", f"{head}:list.txt") == "apple\nbanana\ncherry\nmango"
    conflicts = [e.payload for e in ev if e.topic == "integration.conflict_decision"]
    assert [c["action"] for c in conflicts] == ["resolver"], conflicts
    assert "on_conflict: rerun" in conflicts[0]["reason"]
    spawned = [e for e in ev if e.topic == "resolver.spawned"]
    assert len(spawned) == 1
    sp = spawned[0].payload
    origin = conflicts[0]["proposal_id"]
    verified = {e.payload["proposal_id"]: e.payload for e in ev if e.topic == "integration.proposal_verified"}
    task = verified[origin]["node_id"]
    assert sp["origin"] == origin and sp["node_id"] == rv.resolver_node_id(task, 1)
    assert sp["on_conflict"] == "rerun" and sp["max_tries"] == 1 and sp["base_source"] == "integration_head"
    # the rerun starts from the integration head as it was when the conflict was found
    heads = [e.payload["commit"] for e in ev
             if e.topic == "integration.checkpoint" and e.sequence < spawned[0].sequence]
    assert sp["base_ref"] == heads[-1]
    # its own attempt: a node_execution_id and a grant of its own, dispatched as a resolver, the same command
    neid = sp["node_execution_id"]
    firsts = {e.node_execution_id for e in ev if e.topic == "task.dispatched" and e.payload["kind"] == "first"}
    assert neid not in firsts and len(firsts) == 2
    assert [e for e in ev if e.topic == "grant.issued" and e.node_execution_id == neid]
    dispatched = [e.payload for e in ev if e.topic == "task.dispatched" and e.node_execution_id == neid]
    assert dispatched and dispatched[0]["kind"] == "resolver" and dispatched[0]["base_ref"] == heads[-1]
    # its proposal carries the provenance the coordinator wrote, and landed in the final plan
    rerun = [p for p in verified.values() if p.get("resolves")]
    assert len(rerun) == 1 and rerun[0]["resolves"]["origin_proposal_id"] == origin
    assert rerun[0]["node_id"] == sp["node_id"]
    final = [e.payload for e in ev if e.topic == "integration.stack_plan"][-1]
    assert rerun[0]["proposal_id"] in [p["proposal_id"] for p in final["ordered_proposals"]]


# -- pre-flight -------------------------------------------------------------------------------

BAD = {
    # name: (task fields, expected code, a word the error names)
    "unknown_mode": ({"on_conflict": "retry"}, "SCHEMA_VALIDATION_ERROR", "on_conflict"),
    "not_a_command": ({"on_conflict": "rerun", "action_spec": {"intent": "litho.optimize",
                                                               "params": {"layout": "l.oas"}}},
                      "ON_CONFLICT_INVALID", "litho.optimize"),
    "bound_without_rerun": ({"rerun_max_tries": 2}, "ON_CONFLICT_INVALID", "rerun_max_tries"),
    "bound_with_drop": ({"on_conflict": "drop", "rerun_max_tries": 2}, "ON_CONFLICT_INVALID", "rerun_max_tries"),
    "zero_tries": ({"on_conflict": "rerun", "rerun_max_tries": 0}, "SCHEMA_VALIDATION_ERROR", "rerun_max_tries"),
    "too_many_tries": ({"on_conflict": "rerun", "rerun_max_tries": 9}, "SCHEMA_VALIDATION_ERROR",
                       "rerun_max_tries"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_on_conflict_is_refused_by_preflight_before_any_work(name, git_repo, tmp_path, capsys):
    from coordinator.cli.main import main as dome_main

    fields, code, word = BAD[name]
    task = {**cmd_task("apple", _add("apple")), **fields}
    q = write_queue(tmp_path, _repo(git_repo), [task], validations=[SORTED])
    ops = tmp_path / "ops"
    rc = dome_main(["run", str(q), "--ops-root", str(ops), "--json"])
    err = json.loads(capsys.readouterr().out)["error"]
    assert rc == 2 and err["code"] == code, err
    assert word in err["message"] + json.dumps(err["details"]), err
    assert not ops.exists()  # no ledger, no keys, no run directory: nothing was spent


def test_a_good_on_conflict_passes_preflight(git_repo, tmp_path):
    from coordinator.preflight import prepare

    q = write_queue(tmp_path, _repo(git_repo), _tasks(on_conflict="rerun", rerun_max_tries=3), validations=[SORTED])
    nodes = prepare(q).wq.graph.nodes
    assert nodes["apple"].conflict_reruns == 3 and nodes["banana"].conflict_reruns == 3


# -- the bound (pure) --------------------------------------------------------------------------

def test_the_bound_is_the_tasks_own_and_a_task_can_refuse_the_queues_resolvers() -> None:
    tasks = [cmd_task("a", "true", on_conflict="rerun", rerun_max_tries=2), cmd_task("b", "true", on_conflict="drop"),
             cmd_task("c", "true")]
    limits = rv.TryLimits.of(build_graph(tasks), 3)
    assert [limits.for_node(n) for n in ("a", "b", "c")] == [2, 0, 3]
    assert limits.for_node(rv.resolver_node_id("a", 2)) == 2  # a rerun's own conflict: the same chain's bound
    assert limits.reruns("a") and not limits.reruns("b") and not limits.reruns("c")
    # the queue's default is what a task without the field gets: with none, c's conflict is dropped
    assert rv.TryLimits.of(build_graph(tasks), 0).for_node("c") == 0


def _chain_events(rerun_fate: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    head = [("patch.submitted", {"proposal_id": "pp-a", "node_execution_id": "ne-a"}),
            ("integration.resolver_request", {"proposal_id": "pp-a", "conflict_fingerprint": "f1"}),
            ("resolver.spawned", {"node_execution_id": "ne-r", "origin": "pp-a", "request": "pp-a|f1", "try": 1,
                                  "node_id": "a@resolve1", "proposal_id": "pp-a"}),
            ("patch.submitted", {"node_execution_id": "ne-r", "proposal_id": "pp-r"}),
            ("task.completed", {"node_execution_id": "ne-r", "outcome": "succeeded"})]
    # the envelope's node_id is the coordinator's (the grant's), not the worker's word
    return [{"topic": t, "payload": p, "node_id": "a" if p.get("node_execution_id") == "ne-a" else None}
            for t, p in head + rerun_fate]


@pytest.mark.parametrize("fate,words", [
    ([("integration.conflict_decision", {"proposal_id": "pp-r", "action": "drop",
                                          "reason": "conflicts with the stack; dropped"})], "dropped: conflicts"),
    ([("integration.proposal_rejected", {"proposal_id": "pp-r", "rejections": [{"code": "PATH_POLICY"}]})],
     "rejected at verification (PATH_POLICY)"),
    ([("integration.ejected", {"proposal_ids": ["pp-r"]})], "ejected: validation failed"),
])
def test_a_rerun_whose_proposal_does_not_land_spends_its_try_and_the_drop_says_so(fate, words) -> None:
    limits = rv.TryLimits.of(build_graph([cmd_task("a", "true", on_conflict="rerun")]), 0)
    pending = rv.fold_resolver_events(_chain_events([]))
    assert rv.exhausted_now(pending, limits) == [] and rv.to_spawn(pending, limits) == []  # its proposal may land
    facts = rv.fold_resolver_events(_chain_events(fate))
    assert rv.exhausted_now(facts, limits) == [("pp-a", 1)]
    reason = rv.exhausted_reason(facts, "pp-a", 1, limits)
    assert "rerun of a" in reason and "on_conflict: rerun" in reason and words in reason, reason
    # with a second try allowed, the chain gets it instead of being dropped
    two = rv.TryLimits.of(build_graph([cmd_task("a", "true", on_conflict="rerun", rerun_max_tries=2)]), 0)
    assert [(o, t) for o, _, t in rv.to_spawn(facts, two)] == [("pp-a", 2)] and rv.exhausted_now(facts, two) == []


def test_a_chains_bound_comes_from_the_coordinators_record_not_the_workers_claim() -> None:
    """A worker of a task without reruns submits a proposal claiming to be the rerun task's: its
    conflict gets that task's bound only if the fold believed the claim (it reads the envelope's
    node_id, which the gateway takes from the grant)."""
    limits = rv.TryLimits.of(build_graph([cmd_task("a", "true", on_conflict="rerun", rerun_max_tries=3),
                                          cmd_task("b", "true")]), 0)
    lying = {"topic": "patch.submitted", "node_id": "b", "node_execution_id": "ne-b",
             "payload": {"proposal_id": "pp-b", "node_execution_id": "ne-b", "node_id": "a",
                         "proposal": {"proposal_id": "pp-b", "node_id": "a"}}}
    request = {"topic": "integration.resolver_request",
               "payload": {"proposal_id": "pp-b", "conflict_fingerprint": "f"}}
    facts = rv.fold_resolver_events([lying, request])
    assert rv.limit(limits, facts, "pp-b") == 0 and not rv.available(facts, "pp-b", limits)
    assert rv.to_spawn(facts, limits) == [] and rv.exhausted_now(facts, limits) == [("pp-b", 0)]


# -- runs (in-process, no sandbox: the decisions) ----------------------------------------------

def test_without_the_field_a_finish_stage_conflict_is_dropped_as_before(git_repo, ops_root, ledger_env, tmp_path):
    out, ev = _in_process(git_repo, ops_root, ledger_env, tmp_path, _tasks())
    topics = {e.topic for e in ev}
    assert out.status == "promoted"
    # the finish stage of old: one pass, no batches, no resolver
    assert not topics & {"integration.batch", "integration.resolver_request", "resolver.spawned"}
    assert [e.payload["action"] for e in ev if e.topic == "integration.conflict_decision"] == ["drop"]
    assert len(git(git_repo, "show", f"{out.head}:list.txt").splitlines()) == 3


def test_a_rerun_that_fails_drops_the_original_with_the_reason_in_the_verdict(git_repo, ops_root, ledger_env,
                                                                             tmp_path):
    from coordinator.report.explain import explain

    out, ev = _in_process(git_repo, ops_root, ledger_env, tmp_path, _tasks(FAILS_AS_RERUN, on_conflict="rerun"))
    assert out.status == "promoted"  # with the other task's work
    assert len(git(git_repo, "show", f"{out.head}:list.txt").splitlines()) == 3
    assert len([e for e in ev if e.topic == "resolver.spawned"]) == 1
    gave_up = [e.payload for e in ev if e.topic == "integration.resolver_exhausted"]
    assert len(gave_up) == 1
    reason = gave_up[0]["reason"]
    assert "on_conflict: rerun" in reason and "try 1 failed (COMMAND_FAILED" in reason, reason
    final = [e.payload for e in ev if e.topic == "integration.stack_plan"][-1]
    assert reason in json.dumps([r for r in final["rejected"] if r["proposal_id"] == gave_up[0]["proposal_id"]])
    verdict = "\n".join(explain(out.run_id, [e.to_json() for e in ev]).verdict_lines(width=400))
    assert "dropped: rerun of" in verdict and "COMMAND_FAILED" in verdict, verdict
    decisions = [d.text for d in explain(out.run_id, [e.to_json() for e in ev]).decisions]
    assert any(t.startswith("rerun ") and "(try 1 of 1, on_conflict: rerun) starts on the integration head" in t
               for t in decisions), decisions


def test_a_run_whose_task_failed_integrates_nothing_though_its_tasks_ask_for_reruns(
        git_repo, ops_root, ledger_env, tmp_path):
    """The finish stage's integration waits for the tasks and asks the queue first: with
    promote_nothing (the default) a failed task means no batch, no rerun, and the run ends."""
    tasks = [cmd_task("apple", _add("apple"), on_conflict="rerun"),
             cmd_task("broken", "exit 1", on_conflict="rerun", max_attempts=1)]
    out, ev = _in_process(git_repo, ops_root, ledger_env, tmp_path, tasks)
    assert out.status == "failed"
    assert not {e.topic for e in ev} & {"integration.batch", "resolver.spawned", "integration.stack_plan"}


# -- real runs: `dome run`, bubblewrap, real git -----------------------------------------------

def _dome_run(tmp_path: Path, git_repo: Path, tasks: list[dict[str, Any]], *, verify: bool = True,
              **sched: Any) -> tuple[dict, list[Any]]:
    from ledger import Ledger

    q = write_queue(tmp_path, _repo(git_repo), tasks, validations=[SORTED],
                    scheduling={"max_parallel": 2, "endgame_max_duplicates": 0, **sched})
    ops = tmp_path / "ops"
    r = dome_cli("run", str(q), "--ops-root", str(ops), "--json", timeout=300)
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["status"] == "promoted", (out, r.stderr[-3000:])
    if verify:
        v = dome_cli("verify", out["run_id"], "--ops-root", str(ops), "--json", timeout=300)
        assert v.returncode == 0, v.stdout[-3000:]
    led = Ledger.open(None, ops)
    try:
        return out, led.events(out["run_id"])
    finally:
        led.close()


@pytest.mark.slow
def test_dome_run_settles_a_finish_stage_conflict_by_rerunning_the_command_on_the_head(git_repo, tmp_path):
    out, ev = _dome_run(tmp_path, git_repo, _tasks(on_conflict="rerun"))
    first_batch = min(e.sequence for e in ev if e.topic == "integration.batch")
    ended = [e.sequence for e in ev if e.topic == "task.completed" and e.node_id in ("apple", "banana")]
    assert len(ended) == 2 and max(ended) < first_batch  # the finish stage: integration began after the tasks
    _assert_settled_by_a_rerun(git_repo, out["head"], ev)
    assert git(git_repo, "rev-parse", "refs/heads/dome/out") == out["head"]


@pytest.mark.slow
def test_dome_run_settles_an_in_run_conflict_by_rerunning_the_command_on_the_head(git_repo, tmp_path):
    out, ev = _dome_run(tmp_path, git_repo, _tasks(wait=True, on_conflict="rerun"), verify=False,
                        integrate_during_run=True, integration_batch_size=1)
    _assert_settled_by_a_rerun(git_repo, out["head"], ev)
    # during the run: apple's proposal was stacked before banana's attempt ended
    verified = {e.payload["node_id"]: e.sequence for e in ev if e.topic == "integration.proposal_verified"}
    banana_done = next(e.sequence for e in ev if e.topic == "task.completed" and e.node_id == "banana")
    assert verified["apple"] < banana_done


@pytest.mark.slow
def test_a_finish_stage_rerun_lost_to_a_killed_coordinator_runs_again_on_resume(tmp_path):
    """kill -9 right after the rerun is spawned, then `dome run --resume`: the rerun is lost
    (not charged) and dispatched again, the run is promoted with both tasks' work, no
    integration step is recorded twice, and the run verifies."""
    from collections import Counter

    from tests.conftest import make_repo
    from tests.runloop.test_crash_points import _steps, assert_resumed_cleanly, kill_chain

    def make_queue(tmp: Path) -> tuple[Path, Path]:
        repo = _repo(make_repo(tmp / "repo"))
        return repo, write_queue(tmp, repo, _tasks(on_conflict="rerun"), validations=[SORTED],
                                 scheduling={"max_parallel": 2, "endgame_max_duplicates": 0})

    def judge(out: dict, run_id: str, repo: Path, ops: Path, tmpdir: Path) -> None:
        from ledger import Ledger

        assert out["status"] == "promoted", out
        assert git(repo, "show", f"{out['head']}:list.txt") == "apple\nbanana\ncherry\nmango"
        with Ledger.open(None, ops) as led:
            ev = [{"topic": e.topic, "payload": e.payload} for e in led.events(run_id)]
        spawned = [e["payload"] for e in ev if e["topic"] == "resolver.spawned"]
        assert len(spawned) == 2 and Counter(s["try"] for s in spawned) == {1: 2}  # the lost try is not charged
        assert [e for e in ev if e["topic"] == "task.lost"]
        assert not [e for e in ev if e["topic"] == "integration.resolver_exhausted"]
        twice = [k for k, n in _steps(ev).items() if n > 1]
        assert not twice, "\n".join(str(k[:3]) for k in twice)
        assert_resumed_cleanly(run_id, repo, ops, tmpdir)

    assert kill_chain(tmp_path, ["resolver.spawned"], make_queue, judge) == []
