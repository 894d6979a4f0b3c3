"""The fold behind the verdict block, `dome status` and the report: each
proposal's fate and the words a person reads (pure; events shaped as the
ledger records them)."""
from __future__ import annotations

from coordinator.report.explain import explain, reasons

SEQ = iter(range(1, 1000))


def ev(topic: str, node_id: str | None = None, **payload) -> dict:
    return {"topic": topic, "sequence": next(SEQ), "node_id": node_id, "payload": payload}


def conflict(pid: str, action: str, reason: str, path: str = "pkg/core.py", hunk: int | None = 0) -> dict:
    return ev("integration.conflict_decision", proposal_id=pid, action=action, reason=reason,
              decision_id=f"cd-{pid}-{action}", conflicts=[{"path": path, "hunk": hunk, "reason": "overlaps"}])


EVENTS = [
    ev("run.started", promote_to="refs/heads/out"),
    ev("patch.submitted", "refactor", proposal_id="pp-r", touched_files=["pkg/core.py"]),
    ev("patch.submitted", "typo", proposal_id="pp-t", touched_files=["pkg/core.py"]),
    ev("patch.submitted", "docs", proposal_id="pp-d", touched_files=["pkg/core.py"]),
    ev("patch.submitted", "speedup", proposal_id="pp-s", touched_files=["pkg/num.py"]),
    ev("patch.submitted", "evil", proposal_id="pp-e", touched_files=[".git/hooks/x"]),
    ev("integration.proposal_rejected", proposal_id="pp-e",
       rejections=[{"code": "PROPOSAL_PROTECTED_PATH", "message": "touches .git/hooks/x"}]),
    ev("integration.apply_result", proposal_id="pp-r", applied=True),
    ev("integration.apply_result", proposal_id="pp-s", applied=True),
    conflict("pp-t", "reorder", "retry after the remaining proposals"),
    conflict("pp-t", "drop", "conflicts with the stack; dropped"),
    ev("integration.apply_result", proposal_id="pp-t", applied=False, decision="drop"),
    conflict("pp-d", "split", "apply the 1 non-conflicting of 2 parts"),
    ev("integration.split_result", proposal_id="pp-d", partitioning="by_hunk",
       proposal_id_A="pp-d:split-a", proposal_id_B="pp-d:split-b"),
    ev("integration.apply_result", proposal_id="pp-d:split-a", applied=True),
    conflict("pp-d:split-b", "drop", "remainder of a guarded split"),
    ev("integration.validation_report", suite="tests", phase="final", passed=False,
       included_proposals=["pp-r", "pp-s", "pp-d:split-a"]),
    ev("integration.validation_report", suite="tests", phase="bisect", passed=False, included_proposals=["pp-r", "pp-s"]),
    ev("integration.bisect", failing_suites=["tests"], culprit_proposal_ids=["pp-s"], steps=[{}, {}]),
    ev("integration.ejected", proposal_ids=["pp-s"], checkpoint_id="cp-0002", reapplied=["pp-d:split-a"]),
    ev("integration.apply_result", proposal_id="pp-d:split-a", applied=True),
    ev("integration.validation_report", suite="tests", phase="final", passed=True,
       included_proposals=["pp-r", "pp-d:split-a"]),
    ev("gate.computed", passed=True, links=[{"link": "stack_plan", "status": "ok"}]),
    ev("promotion.computed", outcome="blocked", to_ref="refs/heads/out",
       missing=["target:refs/heads/out: invalid (moved since the base; not an ancestor of the head)"]),
    ev("run.finished", status="blocked", head="c" * 40, reason="evidence chain incomplete or human gate"),
]


def test_each_proposal_gets_its_fate_and_the_decision_behind_it() -> None:
    ex = explain("run-x", EVENTS)
    fate = {f.proposal_id: f for f in ex.proposals}
    assert fate["pp-r"].status == "applied"
    assert fate["pp-s"].status == "ejected" and fate["pp-s"].failing_suites == ["tests"]
    assert fate["pp-s"].decision == "bisect"
    assert fate["pp-t"].status == "dropped" and fate["pp-t"].conflicts_with == ["refactor"]
    assert fate["pp-t"].hunks == ["pkg/core.py hunk 0"] and fate["pp-t"].decision_id == "cd-pp-t-drop"
    assert fate["pp-d"].status == "split" and fate["pp-d"].parts == ["pp-d:split-a", "pp-d:split-b"]
    assert fate["pp-e"].status == "rejected" and "PROPOSAL_PROTECTED_PATH" in fate["pp-e"].reason
    assert [(v.phase, v.passed) for v in ex.validations] == [("final", False), ("bisect", False), ("final", True)]


def test_verdict_block_wording() -> None:
    lines = explain("run-x", EVENTS).verdict_lines(200)
    assert lines == [
        "run run-x: blocked",
        "  not promoted to refs/heads/out; the gate is missing:",
        "    - target:refs/heads/out: invalid (moved since the base; not an ancestor of the head)",
        "  proposals: 1 applied whole, 4 not:",
        "    - docs: split by hunk: the part that applies landed; the rest (pkg/core.py hunk 0, "
        "already changed by refactor) dropped",
        "    - evil: rejected at verification: PROPOSAL_PROTECTED_PATH: touches .git/hooks/x",
        "    - speedup: ejected by bisect: suite tests fails with it (checkpoint cp-0002)",
        "    - typo: dropped: conflict at pkg/core.py hunk 0, already changed by refactor",
    ]


def test_integration_decisions_in_ledger_order_with_reasons() -> None:
    ex = explain("run-x", EVENTS)
    kinds = [d.kind for d in ex.decisions]
    assert kinds == ["reject", "apply", "apply", "reorder", "drop", "split", "split", "apply", "drop",
                     "validation", "validation", "bisect", "eject", "apply", "validation", "gate", "promotion"]
    texts = [d.text for d in ex.decisions]
    assert "drop typo: pkg/core.py hunk 0, already changed by refactor; conflicts with the stack; dropped" in texts
    assert "bisect validation tests on 2 proposal(s): FAILED" in texts
    assert "bisect over 2 step(s): tests fails first with speedup" in texts
    assert "promotion blocked to refs/heads/out" in texts
    assert [d.sequence for d in ex.decisions] == sorted(d.sequence for d in ex.decisions)


def test_narrow_verdict_wraps_under_its_item() -> None:
    lines = explain("run-x", EVENTS).verdict_lines(50)
    assert max(len(line) for line in lines) <= 50
    i = lines.index("    - typo: dropped: conflict at pkg/core.py hunk")
    assert lines[i + 1] == "      0, already changed by refactor"  # under its item, not at column 0


def test_reasons_are_data_without_split_parts() -> None:
    r = reasons(explain("run-x", EVENTS))
    assert r["status"] == "blocked" and r["gate_passed"] is True
    assert [p["proposal_id"] for p in r["proposals_not_landed"]] == ["pp-d", "pp-e", "pp-s", "pp-t"]
    assert r["gate_problems"] == [{"link": "target:refs/heads/out", "status": "invalid",
                                   "detail": "moved since the base; not an ancestor of the head"}]


def test_tasks_blocked_by_a_failed_dependency_are_counted() -> None:
    events = [ev("task.dispatched", "build", node_execution_id="ne-1"),
              ev("task.completed", "build", node_execution_id="ne-1", outcome="failed",
                 error={"code": "COMMAND_FAILED", "message": "command exited with 2",
                        "details": {"stderr_tail": "make: *** [all] Error 2\n"}}),
              ev("run.finished", status="failed", counts={"failed": 1, "blocked": 2, "succeeded": 0})]
    assert explain("run-y", events).verdict_lines(100) == [
        "run run-y: failed",
        "  1 task(s) failed:",
        "    - build after 1 attempt(s): COMMAND_FAILED command exited with 2",
        "        | make: *** [all] Error 2",
        "  2 task(s) did not run: they depend on a task that failed",
    ]


def test_a_record_the_view_cannot_read_never_stops_the_run() -> None:
    import io
    import types

    from coordinator.runloop.view import LiveView, PlainView

    odd = types.SimpleNamespace(topic="integration.validation_report", payload={"environment": "not a mapping"},
                                sequence=7, node_id=None, ts="2026-01-01T00:00:00Z", node_execution_id=None)
    for view in (PlainView(io.StringIO()), LiveView(io.StringIO())):
        view.on_record(odd)  # must not raise
    good = types.SimpleNamespace(topic="gate.computed", payload={"passed": True, "links": []}, sequence=8,
                                 node_id=None, ts="2026-01-01T00:00:01Z", node_execution_id=None)
    plain = PlainView(io.StringIO())
    plain.on_record(odd)
    plain.on_record(good)
    assert plain.out.getvalue() == "2026-01-01T00:00:01Z #8 integration gate passed\n"


def test_plain_view_reports_a_long_task_at_each_quarter() -> None:
    import io
    import types

    from coordinator.runloop.view import PlainView

    view = PlainView(io.StringIO())
    for seq, frac in enumerate((0.05, 0.2, 0.26, 0.3, 0.55, 0.8, 0.99, 1.0), start=1):
        view.on_record(types.SimpleNamespace(topic="task.progress", payload={"fraction": frac, "message": f"it {seq}"},
                                             sequence=seq, node_id="opt", ts="T", node_execution_id="ne-1"))
    assert view.out.getvalue().splitlines() == ["T #3 task.progress opt 25% it 3", "T #5 task.progress opt 50% it 5",
                                                "T #6 task.progress opt 75% it 6"]
