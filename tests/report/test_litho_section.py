"""The litho part of the report: averages over the clips beside the best
published result and the gap, a note for a shortened schedule, DRC per mask."""
from __future__ import annotations

import json

from hypothesis import given, strategies as st

from coordinator.report.build import MAX_CROPS, drc_markers, pick_markers
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
    assert "Click a picture to enlarge it; the bar at the bottom left gives the scale." in html
    assert "EPE violation</p>" in html and "figure img{width:480px;max-width:100%" in html


def _violation(rule: str, x: float, y: float) -> dict:
    return {"rule_id": rule, "location_nm": [x, y], "severity": "error"}


@given(st.lists(st.tuples(st.sampled_from(["min_width", "min_space", "min_area", "notch"]),
                          st.integers(0, 2000), st.integers(0, 2000)), max_size=60))
def test_picked_markers_cover_every_rule_before_a_second_of_any(raw) -> None:
    violations = [_violation(r, x, y) for r, x, y in raw]
    picked = pick_markers(violations)
    as_given = {(v["rule_id"], float(v["location_nm"][0]), float(v["location_nm"][1])) for v in violations}
    assert len(picked) == min(MAX_CROPS, len(as_given))
    keys = [(m["rule_id"], m["x_nm"], m["y_nm"]) for m in picked]
    # each picked marker is one of the DRC's, and one place is one close-up (two markers of a rule
    # at the same place would show the same picture twice)
    assert len(set(keys)) == len(keys) and set(keys) <= as_given
    rules = {r for r, _, _ in raw}
    if len(rules) <= MAX_CROPS:
        assert {m["rule_id"] for m in picked} == rules
    counts = [sum(1 for m in picked if m["rule_id"] == r) for r in rules]
    left = {r: sum(1 for v in as_given if v[0] == r) for r in rules}
    # a rule gets a second close-up only when every rule with markers left has one
    for r, n in zip(rules, counts):
        assert all(n <= c + 1 or c == left[q] for q, c in zip(rules, counts))


DRC_EVENTS = EVENTS[:2] + [
    _ev(3, "task.completed", {"node_execution_id": "ne-1", "outcome": "succeeded",
                              "summary": {"layout": "masks/M1_test1.oas", "deck": "mask_rules.py",
                                          "marker_count": 15, "rule_counts": {"min_width": 5, "min_space": 10}},
                              "evidence": [{"kind": "drc_report", "layout": "masks/M1_test1.oas", "digest": "sha256:r"},
                                           {"kind": "drc_violations", "layout": "masks/M1_test1.oas",
                                            "digest": "sha256:v", "marker_count": 15}]},
        node_id="drc-t1"),
    EVENTS[3]]
BLOB = json.dumps({"violations": [_violation("min_width", 100 + i, 200) for i in range(5)]
                   + [_violation("min_space", 300 + i, 400) for i in range(10)]}).encode()


def test_drc_per_mask_names_markers_by_rule_and_where_twelve_are() -> None:
    model = build_model("run-l", DRC_EVENTS)
    drc_markers(model, {"sha256:v": BLOB}.__getitem__)
    html = render_html(model, [])
    assert "<h3>masks/M1_test1.oas: 15 marker(s)</h3>" in html
    assert "<tr><td>min_space</td><td>10</td></tr><tr><td>min_width</td><td>5</td></tr>" in html
    assert "Showing 12 of 15 marker(s), every rule before a second of any." in html
    # without pictures: the twelve places, alternating rules
    assert "<tr><td>1</td><td>min_space</td><td>300</td><td>400</td></tr>" in html
    assert "<tr><td>2</td><td>min_width</td><td>100</td><td>200</td></tr>" in html
    assert "<tr><td>12</td><td>min_space</td><td>306</td><td>400</td></tr>" in html
    assert "<td>13</td>" not in html


def test_drc_close_ups_are_pictures_with_their_rule_and_place() -> None:
    model = build_model("run-l", DRC_EVENTS)
    drc_markers(model, {"sha256:v": BLOB}.__getitem__)
    png = b"\x89PNG\r\n\x1a\nfake"
    (d,) = model.drc
    d["crops"] = [{**m, "png": png} for m in d["picked"]]
    html = render_html(model, [])
    assert html.count('class="crop" tabindex="0">') == 12
    assert 'alt="masks/M1_test1.oas marker 1"' in html and 'alt="masks/M1_test1.oas marker 12"' in html
    assert "<figcaption>min_space at (300, 400) nm</figcaption>" in html
    assert "DRC marker</p>" in html and "<td>1</td><td>min_space</td>" not in html


def test_a_drc_blob_that_cannot_be_read_keeps_the_counts() -> None:
    model = build_model("run-l", DRC_EVENTS)

    def missing(digest: str) -> bytes:
        raise FileNotFoundError(digest)

    drc_markers(model, missing)
    html = render_html(model, [])
    assert "<td>drc-t1</td><td>masks/M1_test1.oas</td><td>mask_rules.py</td><td>15</td>" in html
    assert "marker(s)</h3>" not in html
