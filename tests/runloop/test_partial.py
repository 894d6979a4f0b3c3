"""Partial promotion: `if_tasks_fail: promote_rest` lands the tasks that succeeded
beside one that failed, and every reader of the run says it is partial.

The decision is a pure function (property-tested); the run is real: the CLI,
bubblewrap workers, a real git repository and SQLite ledger, the gate and
`dome verify`."""
from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.runloop.partial import PROMOTE_NOTHING, PROMOTE_REST, decide
from tests.attacks import attack
from tests.conftest import dome_cli, git, make_repo
from tests.runloop.conftest import cmd_task, write_queue

STATES = st.sampled_from(["succeeded", "failed", "blocked"])
NODES = st.dictionaries(st.text("abcdefgh", min_size=1, max_size=4), STATES, min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(NODES, st.sampled_from([PROMOTE_NOTHING, PROMOTE_REST]))
def test_decide_integrates_only_what_the_queue_allows(status, mode):
    d = decide(status, mode)
    short = sorted((n, s) for n, s in status.items() if s != "succeeded")
    assert list(d.tasks_not_landed) == short  # every task that did not succeed is named, nothing else
    if not short:
        assert d.integrate and not d.partial and d.record() == {}
    elif mode == PROMOTE_NOTHING or len(short) == len(status):
        assert not d.integrate and not d.partial and d.record() == {}
    else:
        assert d.integrate and d.partial
        rec = d.record()
        assert rec["partial"] is True and rec["if_tasks_fail"] == PROMOTE_REST
        assert [(r["node_id"], r["status"]) for r in rec["tasks_not_landed"]] == short


def test_decide_refuses_an_unknown_mode_and_unsettled_nodes():
    with pytest.raises(ValueError):
        decide({"a": "succeeded"}, "promote_some")
    with pytest.raises(ValueError):
        decide({"a": "succeeded", "b": "running"}, PROMOTE_REST)


def test_unknown_if_tasks_fail_is_refused_at_load(tmp_path, git_repo):
    q = write_queue(tmp_path, git_repo, [cmd_task("a", "echo a > A.txt")], if_tasks_fail="promote_most")
    res = dome_cli("run", str(q), "--ops-root", str(tmp_path / "ops"), "--json", timeout=60)
    assert res.returncode == 2
    assert json.loads(res.stdout)["error"]["code"] == "SCHEMA_VALIDATION_ERROR"
    assert not (tmp_path / "ops").exists()


def _queue(base: Path, repo: Path, **extra) -> Path:
    """Three tasks: `good` writes A.txt, `boom` fails, `after` depends on `boom` (blocked)."""
    return write_queue(base, repo, [
        cmd_task("good", "echo a > A.txt"),
        cmd_task("boom", "echo boom-detail >&2; exit 3"),
        cmd_task("after", "echo c > C.txt", deps=["boom"])],
        scheduling={"max_parallel": 2, "default_max_attempts": 1, "default_timeout_s": 60},
        validations=[{"suite": "command", "name": "tests", "argv": ["test", "-f", "A.txt"], "required": True}],
        **extra)


@pytest.fixture(scope="module")
def partial_run(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("partial")
    repo = make_repo(base / "repo")
    q = _queue(base, repo, if_tasks_fail="promote_rest")
    res = dome_cli("run", str(q), "--ops-root", str(base / "ops"), "--json", timeout=300)
    out = json.loads(res.stdout)
    return {"base": base, "repo": repo, "res": res, "out": out, "run_id": out["run_id"], "ops": base / "ops"}


NOT_LANDED = [{"node_id": "after", "status": "blocked"}, {"node_id": "boom", "status": "failed"}]


def test_promote_rest_lands_the_rest_beside_a_failed_task(partial_run):
    res, out, repo = partial_run["res"], partial_run["out"], partial_run["repo"]
    assert res.returncode == 7, res.stderr[-2000:]  # promoted, but not whole: never exit 0
    assert out["status"] == "promoted" and out["promoted_ref"] == "refs/heads/dome/out"
    assert out["why"]["partial"] is True and out["why"]["tasks_not_landed"] == NOT_LANDED
    assert [t["node_id"] for t in out["why"]["failed_tasks"]] == ["boom"]
    files = git(repo, "ls-tree", "--name-only", "refs/heads/dome/out").split()
    assert "A.txt" in files and "C.txt" not in files
    verdict = out["why"]["verdict"]
    assert verdict[0].endswith(": promoted (partial)")
    assert "after (blocked), boom (failed)" in " ".join(line.strip() for line in verdict)


def test_partial_run_is_recorded_and_named_by_gate_status_report_and_verify(partial_run):
    run_id, ops = partial_run["run_id"], partial_run["ops"]
    from ledger import Ledger
    ledger = Ledger.open(None, ops)
    try:
        fin = [e for e in ledger.events(run_id) if e.topic == "run.finished"][-1].payload
    finally:
        ledger.close()
    assert fin["partial"] is True and fin["if_tasks_fail"] == "promote_rest"
    assert fin["tasks_not_landed"] == NOT_LANDED
    gate = json.loads((ops / "runs" / run_id / "gate" / "gate.decision.json").read_text())
    assert gate["passed"] is True and gate["partial"] is True and gate["tasks_not_landed"] == NOT_LANDED

    status = json.loads(dome_cli("status", run_id, "--ops-root", str(ops), "--json", timeout=60).stdout)
    assert status["partial"] is True and status["tasks_not_landed"] == NOT_LANDED
    text = dome_cli("status", "--ops-root", str(ops), timeout=60).stdout
    assert f"{run_id}  promoted (partial)" in text

    rep = dome_cli("report", run_id, "--ops-root", str(ops), "--json", "--html", str(partial_run["base"] / "r.html"),
                   timeout=120)
    body = json.loads(rep.stdout)
    assert body["partial"] is True and body["tasks_not_landed"] == NOT_LANDED
    assert "promoted (partial: without after (blocked), boom (failed))" in (partial_run["base"] / "r.html").read_text()

    ver = dome_cli("verify", run_id, "--ops-root", str(ops), "--json", timeout=120)
    v = json.loads(ver.stdout)
    assert ver.returncode == 0 and v["valid"] is True, v["reasons"]
    assert v["partial"] is True and v["tasks_not_landed"] == NOT_LANDED
    assert any(c["kind"] == "partial_run" and c["ok"] for c in v["checks"])
    text = dome_cli("verify", run_id, "--ops-root", str(ops), timeout=120).stdout
    assert "partial: promoted without after (blocked), boom (failed)" in text


def test_partial_run_integrated_during_the_run_is_named_by_the_gate_and_verifies(tmp_path, git_repo):
    """The same partial run with in-run integration (the canvas moves while tasks run):
    the gate of the canvas's finish names the tasks not landed too, and the run verifies."""
    q = _queue(tmp_path, git_repo, if_tasks_fail="promote_rest")
    raw = json.loads(q.read_text())
    raw["scheduling"].update({"integrate_during_run": True, "integration_batch_size": 1})
    q.write_text(json.dumps(raw))
    ops = tmp_path / "ops"
    res = dome_cli("run", str(q), "--ops-root", str(ops), "--json", timeout=300)
    out = json.loads(res.stdout)
    assert res.returncode == 7 and out["why"]["tasks_not_landed"] == NOT_LANDED, res.stderr[-2000:]
    gate = json.loads((ops / "runs" / out["run_id"] / "gate" / "gate.decision.json").read_text())
    assert gate["passed"] is True and gate["tasks_not_landed"] == NOT_LANDED
    v = json.loads(dome_cli("verify", out["run_id"], "--ops-root", str(ops), "--json", timeout=120).stdout)
    assert v["valid"] is True and v["partial"] is True, v["reasons"]


def test_default_promotes_nothing_when_a_task_fails(tmp_path, git_repo):
    repo = git_repo
    q = _queue(tmp_path, repo)
    res = dome_cli("run", str(q), "--ops-root", str(tmp_path / "ops"), "--json", timeout=300)
    out = json.loads(res.stdout)
    assert res.returncode == 5 and out["status"] == "failed" and out["promoted_ref"] is None
    assert out["why"]["partial"] is False
    assert "refs/heads/dome/out" not in git(repo, "for-each-ref", "--format=%(refname)")


def _ev(seq, topic, payload, node_id=None):
    return SimpleNamespace(sequence=seq, topic=topic, payload=payload, node_id=node_id, run_id="r")


def _events(finished: dict) -> list:
    return [_ev(1, "run.started", {}),
            _ev(2, "task.dispatched", {"node_execution_id": "ne-a"}, "a"),
            _ev(3, "task.dispatched", {"node_execution_id": "ne-b"}, "b"),
            _ev(4, "task.completed", {"node_execution_id": "ne-a", "outcome": "succeeded"}),
            _ev(5, "task.completed", {"node_execution_id": "ne-b", "outcome": "failed"}),
            _ev(9, "run.finished", finished)]


def _records(gate_rows):
    prop = SimpleNamespace(topic="integration.proposal_verified", artifact={"proposal_id": "p-a", "node_id": "a"})
    gate = SimpleNamespace(topic="gate.computed", artifact={"tasks_not_landed": gate_rows} if gate_rows else {})
    return [prop, gate]


HONEST = {"status": "promoted", "partial": True, "counts": {"failed": 1},
          "tasks_not_landed": [{"node_id": "b", "status": "failed"}]}


def _partial_check(finished, gate_rows, included):
    from coordinator.integration.verify import _partial
    from coordinator.integration.verify_result import VerifyReport
    rep = VerifyReport("r")
    _partial(rep, _events(finished), _records(gate_rows), 9, included)
    checks = [c for c in rep.checks if c.kind.value == "partial_run"]
    assert len(checks) == 1
    return checks[0]


def test_verify_accepts_an_honest_partial_record():
    assert _partial_check(HONEST, [{"node_id": "b", "status": "failed"}], ["p-a"]).ok


@attack("partial-record-lie")
@pytest.mark.parametrize("finished, gate_rows, included, bad", [
    # promoted with a failed task, without saying it is partial
    ({"status": "promoted", "counts": {"failed": 1}}, None, ["p-a"], "does not say the run is partial"),
    # names a task that succeeded as not landed (hiding which one failed)
    ({**HONEST, "tasks_not_landed": [{"node_id": "a", "status": "failed"}]}, [{"node_id": "a", "status": "failed"}],
     [], "named as not landed yet succeeded: a"),
    # the gate names other tasks than run.finished
    (HONEST, None, ["p-a"], "the gate names other tasks"),
    # a proposal of a task that did not land was included
    ({**HONEST, "tasks_not_landed": [{"node_id": "a", "status": "failed"}]}, [{"node_id": "a", "status": "failed"}],
     ["p-a"], "included proposals of tasks not landed: p-a"),
])
def test_verify_refuses_an_untruthful_partial_record(finished, gate_rows, included, bad):
    check = _partial_check(finished, gate_rows, included)
    assert not check.ok and bad in check.detail, check.detail


@pytest.mark.parametrize("included", [["p-a", "p-b"], ["p-a", "p-b:split-1"]])
def test_verify_refuses_a_smuggled_proposal_of_a_task_not_landed_alone(included):
    """Everything else about the partial record is true (b failed, run.finished and the gate
    both name b); only a proposal of b is among the included ones, whole or as a split."""
    from coordinator.integration.verify import _partial
    from coordinator.integration.verify_result import VerifyReport
    recs = _records([{"node_id": "b", "status": "failed"}]) + [SimpleNamespace(
        topic="integration.proposal_verified", artifact={"proposal_id": "p-b", "node_id": "b"})]
    rep = VerifyReport("r")
    _partial(rep, _events(HONEST), recs, 9, included)
    (check,) = [c for c in rep.checks if c.kind.value == "partial_run"]
    assert not check.ok and check.detail == f"included proposals of tasks not landed: {included[1]}", check.detail
    rep = VerifyReport("r")
    _partial(rep, _events(HONEST), recs, 9, ["p-a"])
    assert [c.ok for c in rep.checks if c.kind.value == "partial_run"] == [True]


def test_a_partial_run_counts_its_blocked_tasks_with_its_failed_ones():
    """The tasks not landed are the failed ones and the blocked ones together: a record naming
    one of each, with counts of one each, agrees; naming only the failed one is refused."""
    both = [{"node_id": "b", "status": "failed"}, {"node_id": "c", "status": "blocked"}]
    honest = {"status": "promoted", "partial": True, "counts": {"failed": 1, "blocked": 1},
              "tasks_not_landed": both}
    assert _partial_check(honest, both, ["p-a"]).ok
    short = _partial_check({**honest, "tasks_not_landed": both[:1]}, both[:1], ["p-a"])
    assert not short.ok and short.detail == "run.finished names 1 task(s) not landed, its counts say 2", short.detail
