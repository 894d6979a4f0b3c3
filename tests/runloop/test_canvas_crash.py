"""kill -9 of `dome run` during in-run integration and during a resolver's attempt,
then `dome run --resume`: every interrupted run ends promoted with the tree of an
uninterrupted one, no integration step is recorded twice, `dome verify` passes.

The scenario: two agents edit one function (one lands, the other conflicts and is
resolved onto the head by a resolver worker), and a third task starts from the
integration head. DOME_CRASH_AFTER_TOPIC=<topic>:<n> ends the process right after
the n-th event of <topic> that it wrote is durable (ledger/crashpoint.py).
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import dome_cli, git
from tests.runloop.conftest import cmd_task
from tests.runloop.test_crash_points import (NEEDS_BWRAP, _dome, _events, _steps, assert_as_uninterrupted,
                                             assert_resumed_cleanly, kill_chain)
from tests.runloop.test_resolver import CHECK, LIB, PUNCTUATE, TYPED

NODES = ["punctuate", "typed", "note"]
# (a task lost to a crash before it finished runs again on the head: it then needs no resolver,
# so the number of proposals depends on where the kill fell; the promoted tree does not)
FIXED = ["run.started", "integration.policy", "integration.requirements", "gate.computed",
         "promotion.computed", "run.finished"]


def _queue(tmp: Path) -> tuple[Path, Path]:
    repo = tmp / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "lib.py").write_text(LIB)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "lib")
    q = {"artifact_kind": "dome.work.queue/v1", "repo": str(repo), "base_ref": "main", "determinism_seed": 5,
         "policy": "default", "promote_to": "refs/heads/dome/out", "validations": [CHECK],
         "tasks": [cmd_task("punctuate", PUNCTUATE), cmd_task("typed", "sleep 1; " + TYPED),
                   cmd_task("note", "grep -q 'hello, ' lib.py && echo ok > NOTE.txt", ["punctuate"])],
         "scheduling": {"integrate_during_run": True, "integration_batch_size": 1, "max_parallel": 2,
                        "endgame_max_duplicates": 0, "resolver_max_tries": 2,
                        "rebase_waves_on_integration_head": True, "advance_baseline": {"after_layers": 1}}}
    qfile = tmp / "work.queue.json"
    qfile.write_text(json.dumps(q))
    return repo, qfile


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("canvas-crash-ref")
    repo, qfile = _queue(base)
    (base / "tmp").mkdir()
    r = _dome(base / "tmp", "run", str(qfile), "--ops-root", str(base / "ops"), "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["status"] == "promoted", r.stderr[-2000:]
    ev = _events(base / "ops", out["run_id"])
    topics = {e["topic"] for e in ev}
    assert {"integration.batch", "integration.resolver_request", "resolver.spawned"} <= topics
    assert [e["payload"]["base_source"] for e in ev if e["topic"] == "wave.started"][-1] == "integration_head"
    assert max(_steps(ev).values()) == 1
    tree = git(repo, "rev-parse", f"{out['head']}^{{tree}}")
    text = git(repo, "show", f"{out['head']}:lib.py")
    assert "name: str" in text and '"hello, "' in text
    return {"tree": tree, "counts": Counter(e["topic"] for e in ev)}


def _one_run(tmp_path: Path, reference: dict, chain: list[str]) -> list[str]:
    return kill_chain(tmp_path, chain, _queue, lambda *a: _judge(*a, reference))


def _judge(out: dict, run_id: str, repo: Path, ops: Path, tmpdir: Path, reference: dict) -> None:
    ev = assert_as_uninterrupted(out, run_id, repo, ops, reference, FIXED)
    # a resolver try lost to the crash is dispatched again, and not charged
    tries = Counter(e["payload"]["try"] for e in ev if e["topic"] == "resolver.spawned")
    assert set(tries) <= {1}
    assert_resumed_cleanly(run_id, repo, ops, tmpdir)


# Each chain: the first kill stops `dome run`, each later one the resume carrying on.
# <topic>:<n> counts the events of <topic> that one coordinator process wrote.
CHAINS = {
    "in-run-integration": ["integration.policy", "integration.batch", "integration.proposal_verified",
                           "integration.stack_plan", "integration.selection_decision", "integration.checkpoint",
                           "integration.apply_result", "integration.validation_report"],
    "resolver-attempt": ["integration.conflict_decision", "integration.resolver_request", "resolver.spawned",
                         "resolver.spawned", "grant.call", "patch.submitted", "task.completed",
                         "integration.batch", "integration.apply_result", "wave.started",
                         "integration.stack_plan:2", "gate.computed", "promotion.computed"],
}


@pytest.mark.slow
@pytest.mark.timeout(900)
@NEEDS_BWRAP
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_kill_during_in_run_integration_and_resolver_then_resume(name, reference, tmp_path):
    chain = list(CHAINS[name])
    k = 0
    while chain:
        k += 1
        chain = _one_run(tmp_path / f"run{k}", reference, chain)


def _dependent_queue(tmp: Path) -> tuple[Path, Path]:
    """B depends on A and starts from a derived base; batches of one, the waves keep the run base."""
    from tests.conftest import make_repo
    from tests.runloop.conftest import write_queue
    repo = make_repo(tmp / "repo")
    tasks = [cmd_task("a", "echo a > a.txt"), cmd_task("b", "test -f a.txt && echo b > b.txt", ["a"])]
    return repo, write_queue(tmp, repo, tasks, scheduling={"integrate_during_run": True,
                                                            "integration_batch_size": 1, "max_parallel": 1})


def _judge_dependent(out: dict, run_id: str, repo: Path, ops: Path, tmpdir: Path) -> None:
    assert out["status"] == "promoted", out
    assert git(repo, "show", f"{out['head']}:a.txt") == "a" and git(repo, "show", f"{out['head']}:b.txt") == "b"
    ev = _events(ops, run_id)
    assert not [e for e in ev if e["topic"] == "integration.proposal_rejected"]
    twice = [k for k, n in _steps(ev).items() if n > 1]
    assert not twice, twice
    v = dome_cli("verify", run_id, "--ops-root", str(ops), "--json")
    assert v.returncode == 0 and json.loads(v.stdout)["valid"] is True, v.stdout[-2000:]


@pytest.mark.slow
@pytest.mark.timeout(600)
@NEEDS_BWRAP
def test_kill_while_a_dependent_batch_is_integrated_then_resume(tmp_path):
    """Killed in the batch that rebuilds B's derived base from A's proposal (stacked in the batch
    before), each resume re-walks the batches: both land, nothing is recorded twice, verify passes."""
    rest = kill_chain(tmp_path, ["integration.batch:2", "integration.proposal_verified", "integration.stack_plan"],
                      _dependent_queue, _judge_dependent)
    assert rest == []
