"""kill -9 of `dome run` after every distinct event topic of the agent-swarm
example, and after each step of the resume itself, then `dome run --resume`.

The crash is exact, not a random delay: DOME_CRASH_AFTER_TOPIC (ledger/crashpoint.py)
ends the coordinator with status 137, no cleanup, right after the chosen event
is durable. Every interrupted run must end promoted with the same tree as an
uninterrupted run, `dome verify` and `dome ledger verify` must pass, no
integration step may be recorded twice, and nothing may be left in the temp dir.
"""
from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path

import pytest

from coordinator.executors.sandbox import probe_bwrap
from coordinator.keys import load_keyring
from ledger import Ledger
from ledger.crashpoint import ENV, EXIT_STATUS
from tests.conftest import dome_cli, git
from tests.examples.test_agent_swarm import EXAMPLE, _make_repo
from tests.runloop.test_crash_resume import check_run

NEEDS_BWRAP = pytest.mark.skipif(not probe_bwrap()[0] and not os.environ.get("CI"),
                                 reason="bubblewrap cannot create namespaces here")

# Every topic an uninterrupted agent-swarm run writes (the reference run checks the list).
TOPICS = ["run.started", "scheduling.decision", "wave.started", "grant.issued", "task.dispatched",
          "grant.call", "artifact.put", "patch.submitted", "task.completed", "task.ack",
          "task.base_derived", "integration.policy", "integration.requirements",
          "integration.proposal_verified", "integration.stack_plan", "integration.selection_decision",
          "integration.checkpoint", "integration.apply_result", "integration.conflict_decision",
          "integration.split_request", "integration.split_result", "integration.validation_report",
          "integration.bisect", "integration.ejected", "gate.computed", "promotion.computed",
          "run.finished"]
# Steps whose number does not depend on the path integration takes (proposal ids are
# random, so the order of equal-scored proposals, and with it the number of reorders,
# may differ from run to run; the promoted tree does not).
FIXED = ["run.started", "integration.policy", "integration.requirements", "integration.proposal_verified",
         "integration.selection_decision", "integration.stack_plan", "gate.computed", "promotion.computed",
         "run.finished"]
STEP_KEYS = ("object_id", "proposal_id", "head_ref", "checkpoint_id", "applied", "action", "phase")


def _steps(ev: list[dict]) -> Counter:
    """Each integration step of a run; a step recorded twice counts 2."""
    return Counter((e["topic"], *(json.dumps(e["payload"].get(k)) for k in STEP_KEYS)) for e in ev
                   if e["topic"].split(".")[0] in ("integration", "gate", "promotion"))
NODES = ["refactor-slugify", "review-refactor", "docstrings", "fix-typo-core", "fix-typo-readme",
         "add-median", "optimize-clamp"]


def _queue(tmp: Path, template: Path) -> tuple[Path, Path]:
    repo = tmp / "repo"
    shutil.copytree(template, repo, symlinks=True)
    q = json.loads((EXAMPLE / "work.queue.json").read_text())
    q["repo"] = str(repo)
    qfile = tmp / "work.queue.json"
    qfile.write_text(json.dumps(q))
    return repo, qfile


def _dome(tmpdir: Path, *args: str, crash: str | None = None):
    env = {"TMPDIR": str(tmpdir)}
    if crash:
        env[ENV] = crash
    return dome_cli(*args, env=env, timeout=300)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One uninterrupted run: its promoted tree and how often it wrote each topic."""
    base = tmp_path_factory.mktemp("crash-ref")
    template = _make_repo(base / "template")
    (base / "ref").mkdir()
    repo, qfile = _queue(base / "ref", template)
    (base / "tmp").mkdir()
    r = _dome(base / "tmp", "run", str(qfile), "--ops-root", str(base / "ops"), "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["status"] == "promoted", r.stderr[-2000:]
    ev = _events(base / "ops", out["run_id"])
    counts = Counter(e["topic"] for e in ev)
    # task.progress comes only from a worker slow enough to report it: not a fixed step
    assert sorted(set(counts) - {"task.progress"}) == sorted(TOPICS), "the example's topics changed"
    assert max(_steps(ev).values()) == 1  # the step key tells every step of one pass apart
    return {"template": template, "tree": git(repo, "rev-parse", f"{out['promoted_ref']}^{{tree}}"),
            "counts": counts, "promote_to": out["promoted_ref"]}


def _events(ops: Path, run_id: str) -> list[dict]:
    with Ledger.open(None, ops) as ledger:
        return [{"topic": e.topic, "payload": e.payload} for e in ledger.events(run_id)]


def _run_chain(tmp_path: Path, reference: dict, chain: list[str]) -> None:
    """Kill `dome run` after chain[0], each following resume after the next topic of the
    chain, then resume to the end and judge the result. A resume that finishes the run
    before its topic comes round (the order of parallel workers varies) is judged, and
    the rest of the chain goes on with a fresh run."""
    while chain:
        chain = _one_run(tmp_path / f"run{len(chain)}", reference, chain)


def _one_run(tmp_path: Path, reference: dict, chain: list[str]) -> list[str]:
    return kill_chain(tmp_path, chain, lambda t: _queue(t, reference["template"]),
                      lambda out, run_id, repo, ops, tmpdir: _judge(out, run_id, repo, ops, tmpdir, reference))


def kill_chain(tmp_path: Path, chain: list[str], make_queue, judge) -> list[str]:
    """One run of `make_queue(dir) -> (repo, queue file)`, killed after chain[0], each resume
    after the next topic; the run resumed to its end is judged by `judge(out, run_id, repo, ops,
    tmpdir)`. Returns the topics of the chain a resume did not reach (it finished first)."""
    repo, qfile = make_queue(tmp_path)
    ops, tmpdir = tmp_path / "ops", tmp_path / "tmp"
    tmpdir.mkdir()
    r = _dome(tmpdir, "run", str(qfile), "--ops-root", str(ops), "--json", crash=chain[0])
    assert r.returncode == EXIT_STATUS, (chain[0], r.returncode, r.stdout[-500:], r.stderr[-2000:])
    with Ledger.open(None, ops) as ledger:
        (run_id,) = ledger.run_ids()
    rest = chain[1:]
    while rest:
        r = _dome(tmpdir, "run", "--resume", run_id, "--ops-root", str(ops), "--json", crash=rest[0])
        if r.returncode != EXIT_STATUS:
            break
        rest = rest[1:]
    else:
        r = _dome(tmpdir, "run", "--resume", run_id, "--ops-root", str(ops), "--json")
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-1500:]
    judge(json.loads(r.stdout), run_id, repo, ops, tmpdir)
    return rest


def assert_as_uninterrupted(out: dict, run_id: str, repo: Path, ops: Path, reference: dict,
                            fixed: list[str]) -> list[dict]:
    """A resumed run ends as the uninterrupted one did: promoted, the same tree, the ref at the
    head, the same count of each topic in `fixed`, and no step recorded twice. Returns its events."""
    assert out["status"] == "promoted", out
    assert git(repo, "rev-parse", out["promoted_ref"]) == out["head"]
    assert git(repo, "rev-parse", f"{out['head']}^{{tree}}") == reference["tree"]
    ev = _events(ops, run_id)
    counts = Counter(e["topic"] for e in ev)
    assert {t: counts[t] for t in fixed} == {t: reference["counts"][t] for t in fixed}
    twice = [k for k, n in _steps(ev).items() if n > 1]
    assert not twice, twice  # no step (apply, checkpoint, validation, decision) recorded twice
    return ev


def _judge(out: dict, run_id: str, repo: Path, ops: Path, tmpdir: Path, reference: dict) -> None:
    ev = assert_as_uninterrupted(out, run_id, repo, ops, reference, FIXED)
    assert ev[-1]["topic"] == "run.finished"
    with Ledger.open(None, ops) as ledger:
        check_run(ledger, run_id, NODES)
    assert_resumed_cleanly(run_id, repo, ops, tmpdir)


def assert_resumed_cleanly(run_id: str, repo: Path, ops: Path, tmpdir: Path) -> None:
    """What every resumed run must leave: a ledger and a run record that verify, no temp
    files, no canvas folder and no extra worktree."""
    with Ledger.open(None, ops) as ledger:
        assert ledger.verify(load_keyring(ops)).ok  # what `dome ledger verify` checks
    v = dome_cli("verify", run_id, "--ops-root", str(ops), "--json")
    assert v.returncode == 0 and json.loads(v.stdout)["valid"] is True, v.stdout[-2000:]
    assert sorted(p.name for p in tmpdir.iterdir()) == []
    assert not list((ops / "runs" / run_id).glob("canvas*"))
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


# Each chain is one run killed after each of its topics in turn, in the order the example
# first writes them: the first kill stops `dome run`, each later one the resume carrying on
# from the last. Together they kill the run after every distinct topic it writes, and the
# resume after its own steps (run.resumed, task.lost with its grant.revoked).
CHAINS = {
    "dispatch": ["run.started", "run.resumed", "scheduling.decision", "wave.started", "grant.issued",
                 "task.dispatched", "task.lost", "task.dispatched", "grant.revoked"],
    "workers": ["grant.call", "artifact.put", "patch.submitted", "task.completed", "task.ack",
                "task.base_derived"],
    "integration": ["integration.policy", "integration.requirements", "integration.proposal_verified",
                    "integration.stack_plan", "integration.selection_decision", "integration.checkpoint",
                    "integration.apply_result", "integration.conflict_decision", "integration.split_request",
                    "integration.split_result"],
    "decision": ["integration.validation_report", "integration.validation_report", "integration.bisect",
                 "integration.ejected", "gate.computed", "promotion.computed", "run.finished"],
}


def test_the_chains_kill_after_every_topic() -> None:
    assert set(TOPICS) <= {t for chain in CHAINS.values() for t in chain}


@pytest.mark.slow
@NEEDS_BWRAP
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_kill_after_every_topic_then_resume_ends_as_an_uninterrupted_run(name, reference, tmp_path):
    _run_chain(tmp_path, reference, list(CHAINS[name]))
