"""The report is a pure fold of ledger events; its HTML is self-contained."""
from __future__ import annotations

from coordinator.report.html import ClipSection, render_html
from coordinator.report.model import build_model
from coordinator.report.svg import Attempt, _pack, timeline_svg


def _ev(seq: int, topic: str, payload: dict, **kw) -> dict:
    return {"sequence": seq, "topic": topic, "ts": f"2026-01-01T00:00:{seq:02d}Z", "payload": payload, **kw}


EVENTS = [
    _ev(1, "run.started", {"repo": "/r", "base_ref": "a" * 40, "base_ref_input": "main", "determinism_seed": 3}),
    _ev(2, "wave.started", {}),
    _ev(3, "task.dispatched", {"node_execution_id": "ne-1", "kind": "first"}, node_id="opt"),
    _ev(4, "task.dispatched", {"node_execution_id": "ne-2", "kind": "endgame_duplicate"}, node_id="opt"),
    _ev(5, "patch.submitted", {"proposal_id": "pp-1", "touched_files": ["m.oas"]}, node_id="opt"),
    _ev(6, "task.completed", {"node_execution_id": "ne-1", "outcome": "succeeded",
                              "evidence": [{"kind": "litho.optimize", "metrics": {"l2_nm2": 5}}]}, node_id="opt"),
    _ev(7, "task.cancelled", {"node_execution_id": "ne-2"}, node_id="opt"),
    _ev(8, "task.dispatched", {"node_execution_id": "ne-3", "kind": "first"}, node_id="hang"),
    _ev(9, "task.timeout", {"node_execution_id": "ne-3"}, node_id="hang"),
    _ev(10, "integration.apply_result", {"proposal_id": "pp-1", "applied": True}),
    _ev(11, "integration.validation_report", {"suite": "tests", "passed": False, "head_ref": "b" * 40}),
    _ev(12, "gate.computed", {"passed": False, "links": [
        {"link": "stack_plan", "status": "ok"}, {"link": "validation:tests", "status": "failed"}],
        "missing": ["validation:tests"]}),
    _ev(13, "run.finished", {"status": "blocked", "head": "b" * 40, "missing": ["validation:tests"]}),
]


def test_fold_counts_attempts_outcomes_and_chain() -> None:
    m = build_model("run-x", EVENTS)
    assert m.status == "blocked" and m.waves == 1 and m.event_count == len(EVENTS)
    outcome = {a.label.split()[0]: a.status for a in m.attempts}
    assert outcome == {"ne-1": "completed", "ne-2": "cancelled", "ne-3": "timeout"}
    assert [p.status for p in m.proposals] == ["applied"]
    assert m.validations[0].passed is False
    status = {n.node_id: n.status for n in m.chain_nodes}
    assert status["validation:tests"] == "failed" and status["stack_plan"] == "present"
    assert status["gate"] == "failed" and status["promotion"] == "missing"
    assert m.evidence[0].kind == "litho.optimize"


def test_html_names_missing_links_and_embeds_pictures() -> None:
    m = build_model("run-x", EVENTS)
    png = b"\x89PNG\r\n\x1a\nfake"
    html = render_html(m, [ClipSection("M1_test1", {"mask": png}, {"l2_nm2": 5}, [{"method": "X", "L2_nm2": 9}])])
    assert "validation:tests" in html and "blocked" in html
    assert "data:image/png;base64," in html and "M1_test1" in html
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")  # self-contained


def test_overlapping_attempts_get_their_own_rows() -> None:
    a = [Attempt("n", "x", 0, 5, "completed", 1), Attempt("n", "y", 1, 3, "failed", 1),
         Attempt("n", "z", 5, 6, "completed", 2)]
    slots = _pack(a)
    assert slots[0] != slots[1] and slots[2] == 0
    assert timeline_svg(a).count("<rect") >= 3


def test_tasks_started_at_one_instant_keep_their_dispatch_order() -> None:
    """A wave's dispatches are one transaction and share one time stamp: the timeline's rows
    follow the ledger's order then, not the node ids' alphabet."""
    a = [Attempt("zeta", "z1", 0.5, 2, "completed", 1, order=7), Attempt("alpha", "a1", 0.5, 1, "completed", 1, order=9),
         Attempt("mid", "m1", 0.2, 3, "completed", 1, order=12)]
    svg = timeline_svg(a)
    assert svg.index(">mid<") < svg.index(">zeta<") < svg.index(">alpha<")
