"""Resolver workers: a conflict that survives reorder and split becomes a task on the
integration head; its proposal carries provenance to the original and is stacked like
any other; tries per conflict are bounded by policy."""
from __future__ import annotations

import json
from pathlib import Path

from coordinator.runloop.finish import integration_finish
from tests.conftest import git
from tests.runloop.conftest import cmd_task, run_queue, write_queue

LIB = 'def greet(name):\n    return "hello " + name\n'
PUNCTUATE = "python3 -c \"import pathlib;p=pathlib.Path('lib.py');" \
            "p.write_text(p.read_text().replace('return \\\"hello \\\" + name', 'return \\\"hello, \\\" + name + \\\"!\\\"'))\""
TYPED = "sed -i 's/^def greet(name):/def greet(name: str) -> str:/' lib.py"
CHECK = {"suite": "command", "name": "tests",
         "argv": ["python3", "-c", "import lib; assert lib.greet('x') == 'hello, x!', lib.greet('x')"]}


def _repo(git_repo: Path) -> Path:
    (git_repo / "lib.py").write_text(LIB)
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-q", "-m", "lib")
    return git_repo


def _run(git_repo, ops_root, ledger_env, tmp_path, tasks, **sched):
    q = write_queue(tmp_path, _repo(git_repo), tasks, validations=[CHECK],
                    scheduling={"integrate_during_run": True, "integration_batch_size": 1, "max_parallel": 2,
                                "endgame_max_duplicates": 0, **sched})
    _, out = run_queue(q, ops_root, ledger_env, sandbox="none", finish=integration_finish)
    return out, ledger_env[0].events(out.run_id)


def test_two_agents_edit_one_function_the_second_is_resolved_onto_the_head(
        git_repo: Path, ops_root: Path, ledger_env, tmp_path: Path) -> None:
    # "typed" waits for "punctuate" to finish (it needs the same slot), so it starts on the run base
    # too but lands second: its edit touches the line next to punctuate's, a conflict on the head
    tasks = [cmd_task("punctuate", PUNCTUATE), cmd_task("typed", "sleep 1; " + TYPED)]
    out, ev = _run(git_repo, ops_root, ledger_env, tmp_path, tasks, resolver_max_tries=2)
    assert out.status == "promoted", out
    topics = [e.topic for e in ev]
    assert "integration.resolver_request" in topics
    spawned = [e for e in ev if e.topic == "resolver.spawned"]
    assert len(spawned) == 1
    sp = spawned[0].payload
    req = next(e.payload for e in ev if e.topic == "integration.resolver_request")
    assert sp["origin"] == req["proposal_id"] and sp["try"] == 1 and sp["base_source"] == "integration_head"
    # the resolver started on the head as it was then, with a grant of its own
    heads = [e.payload["commit"] for e in ev if e.topic == "integration.checkpoint" and e.sequence < spawned[0].sequence]
    assert sp["base_ref"] == heads[-1]
    dispatched = [e for e in ev if e.topic == "task.dispatched" and e.node_execution_id == sp["node_execution_id"]]
    assert dispatched and dispatched[0].payload["kind"] == "resolver" and dispatched[0].payload["base_ref"] == heads[-1]
    assert [e for e in ev if e.topic == "grant.issued" and e.node_execution_id == sp["node_execution_id"]]
    # its proposal is verified with provenance to the original and the conflict decision, and lands
    verified = [e.payload for e in ev if e.topic == "integration.proposal_verified" and e.payload.get("resolves")]
    assert len(verified) == 1
    res = verified[0]["resolves"]
    decision = next(e.payload for e in ev if e.topic == "integration.conflict_decision"
                    and e.payload["action"] == "resolver")
    assert res["origin_proposal_id"] == req["proposal_id"] and res["conflict_decision"] == decision["decision_id"]
    final = [e.payload for e in ev if e.topic == "integration.stack_plan"][-1]
    assert verified[0]["proposal_id"] in [p["proposal_id"] for p in final["ordered_proposals"]]
    tree = git(git_repo, "show", f"{out.head}:lib.py")
    assert "def greet(name: str) -> str:" in tree and '"hello, " + name + "!"' in tree, tree
    assert git(git_repo, "rev-parse", "refs/heads/dome/out") == out.head


def test_a_resolver_that_keeps_failing_is_tried_n_times_then_the_proposal_is_dropped_with_why(
        git_repo: Path, ops_root: Path, ledger_env, tmp_path: Path) -> None:
    # in resolver mode this task fails (DOME_RESOLVE is set): every try is spent
    stubborn = cmd_task("typed", f'sleep 1; [ -z "$DOME_RESOLVE" ] || exit 3; {TYPED}', max_attempts=1)
    tasks = [cmd_task("punctuate", PUNCTUATE), stubborn]
    out, ev = _run(git_repo, ops_root, ledger_env, tmp_path, tasks, resolver_max_tries=2)
    assert out.status == "promoted", out
    spawned = [e.payload for e in ev if e.topic == "resolver.spawned"]
    assert [s["try"] for s in spawned] == [1, 2]
    gave_up = [e.payload for e in ev if e.topic == "integration.resolver_exhausted"]
    assert len(gave_up) == 1 and gave_up[0]["tries"] == 2 and "2 time(s)" in gave_up[0]["reason"]
    final = [e.payload for e in ev if e.topic == "integration.stack_plan"][-1]
    dropped = [r for r in final["rejected"] if r["proposal_id"] == gave_up[0]["proposal_id"]]
    assert dropped and "resolver tried 2" in json.dumps(dropped)
    assert "def greet(name):" in git(git_repo, "show", f"{out.head}:lib.py")


def test_without_resolver_tries_the_conflict_is_dropped(git_repo: Path, ops_root: Path, ledger_env,
                                                        tmp_path: Path) -> None:
    tasks = [cmd_task("punctuate", PUNCTUATE), cmd_task("typed", "sleep 1; " + TYPED)]
    out, ev = _run(git_repo, ops_root, ledger_env, tmp_path, tasks)
    assert out.status == "promoted"
    assert not [e for e in ev if e.topic in ("resolver.spawned", "integration.resolver_request")]
    assert [e.payload for e in ev if e.topic == "integration.conflict_decision"][-1]["action"] == "drop"


def test_a_resolvers_proposal_is_judged_with_its_original_tasks_risk_and_atomicity() -> None:
    """Attack: a resolver attempt (node `typed@resolve1`, not in the graph) declares its
    proposal low risk and hunk_ok to slip past the task's risk floor and human gate."""
    from coordinator.integration.finish import apply_task_meta
    from coordinator.runloop.resolver import resolver_node_id, with_resolver_nodes

    meta = with_resolver_nodes({"typed": {"risk": "high", "atomicity": "atomic_proposal"}}, 2)
    lying = {"proposal_id": "pp-x", "node_id": resolver_node_id("typed", 2), "risk": {"class": "low"},
             "atomicity": "hunk_ok"}
    judged = apply_task_meta(lying, meta)
    assert judged["risk"]["class"] == "high" and judged["atomicity"] == "atomic_proposal"
    # without the resolver nodes in the table the lie would stand (what the rule prevents)
    assert apply_task_meta(lying, {"typed": meta["typed"]})["risk"] == {"class": "low"}
