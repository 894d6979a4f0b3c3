"""The litho part of the report: averages over the clips beside the best
published result and the gap, a note for a shortened schedule, DRC per mask."""
from __future__ import annotations

from coordinator.report.html import ClipSection, render_html
from coordinator.report.model import build_model


def _ev(seq: int, topic: str, payload: dict, **kw) -> dict:
    return {"sequence": seq, "topic": topic, "ts": f"2026-01-01T00:00:{seq:02d}Z", "payload": payload, **kw}


EVENTS = [
    _ev(1, "run.started", {"repo": "/r"}),
    _ev(2, "task.dispatched", {"node_execution_id": "ne-1", "kind": "first"}, node_id="drc-t1"),
    _ev(3, "task.completed", {"node_execution_id": "ne-1", "outcome": "succeeded",
                              "summary": {"layout": "masks/M1_test1.oas", "deck": "mask_rules.drc",
                                          "marker_count": 3, "rule_counts": {"min_width": 2, "min_space": 1}}},
        node_id="drc-t1"),
    _ev(4, "run.finished", {"status": "promoted"}),
]


def test_summary_row_gap_quick_note_and_drc_per_mask() -> None:
    clips = [ClipSection("M1_test1", {}, {"l2_nm2": 40000, "pvb_nm2": 50000, "epe_violations": 2},
                         [{"method": "A", "L2_nm2": "36000", "PVB_nm2": "50000", "EPE": "0"}], iterations=60),
             ClipSection("M1_test2", {}, {"l2_nm2": 30000, "pvb_nm2": 40000, "epe_violations": 0},
                         [{"method": "B", "L2_nm2": "34000", "PVB_nm2": "40000", "EPE": "0"}], iterations=60)]
    html = render_html(build_model("run-l", EVENTS), clips, quick_iterations=60)
    assert "<td>dome, mean of 2 clip(s)</td><td>35,000</td><td>45,000</td><td>1</td>" in html
    assert "<td>best published per clip, mean</td><td>35,000</td><td>45,000</td><td>0</td>" in html
    assert "<td>gap to best published</td><td>+0.0%</td><td>+0.0%</td><td></td>" in html
    assert "Quick schedule: the masks were optimised with 60 ILT iterations" in html
    assert "<td>drc-t1</td><td>masks/M1_test1.oas</td><td>mask_rules.drc</td><td>3</td>" \
           "<td>min_space: 1, min_width: 2</td>" in html
    full = render_html(build_model("run-l", EVENTS), clips)
    assert "Quick schedule" not in full


def test_pictures_can_be_enlarged_and_have_a_legend() -> None:
    png = b"\x89PNG\r\n\x1a\nfake"
    html = render_html(build_model("run-l", EVENTS), [ClipSection("M1_test1", {"mask": png, "violations": png}, {})])
    assert html.count('" tabindex="0">') == 2 and "figure img:focus{position:fixed" in html
    assert "Click a picture to enlarge it." in html and "EPE violation</p>" in html
