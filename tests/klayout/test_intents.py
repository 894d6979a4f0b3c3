"""drc.run intent and drc validation suite on a real checkout with real layouts."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from registry.errors import DomeError

from registry.canonical import digest_bytes
from worker_sdk.cancel import CancellationToken
from worker_sdk.klayout_tools import intents
from worker_sdk.klayout_tools.errors import KlayoutToolError

from .layouts import build_layout


class Ctx:
    def __init__(self, scratch: Path, action: dict) -> None:
        self.scratch = scratch
        self.action = action
        self.seed = 0
        self.token = CancellationToken()
        self.limits: dict = {}
        self.artifacts: dict[str, bytes] = {}
        self.beats: list[tuple[float, str]] = []

    def progress(self, fraction: float, message: str = "") -> None:
        self.beats.append((fraction, message))

    def put_artifact(self, data: bytes, media_type: str = "application/octet-stream") -> str:
        digest = digest_bytes(data)
        self.artifacts[digest] = data
        return digest


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "checkout"
    (repo / "masks").mkdir(parents=True)
    build_layout().write(str(repo / "masks" / "dirty.gds"))
    import klayout.db as kdb
    clean = kdb.Layout()
    clean.dbu = 0.001
    top = clean.create_cell("TOP")
    top.shapes(clean.layer(2, 0)).insert(kdb.Box(0, 0, 5000, 5000))
    clean.write(str(repo / "masks" / "clean.oas"))
    return repo


RULES = {"layer": "2", "datatype": "0", "min_width": "0.2", "min_space": "0.2", "min_area": "0.05"}


def test_run_drc_intent_writes_evidence(checkout: Path) -> None:
    ctx = Ctx(checkout, {"intent": "drc.run", "deck": "builtin:mask_rules", "script_type": "python",
                         "layout": "masks/dirty.gds", "top_cell": "TOP", "params": RULES, "write_to": "drc"})
    res = intents.run_drc(ctx)
    assert res.summary["marker_count"] == 3 and res.summary["passed"] is False
    assert res.summary["rule_counts"] == {"min_area": 1, "min_space": 1, "min_width": 1}
    kinds = {e["kind"]: e for e in res.evidence}
    assert set(kinds) == {"drc_report", "drc_violations"}
    viol = json.loads(ctx.artifacts[kinds["drc_violations"]["digest"]])
    assert len(viol["violations"]) == 3 and viol["violations"][0]["coordinate_frame"] == "input_layout_native"
    assert b"report-database" in ctx.artifacts[kinds["drc_report"]["digest"]]
    assert (checkout / "drc" / "violations.json").is_file() and (checkout / "drc" / "report.lyrdb").is_file()
    assert ctx.beats[-1][0] == 1.0 and res.metrics["marker_count"] == 3
    # without write_to nothing lands in the checkout
    before = sorted(p.name for p in checkout.rglob("*"))
    ctx2 = Ctx(checkout, {"deck": "builtin:mask_rules", "layout": "masks/dirty.gds", "top_cell": "TOP",
                          "params": RULES})
    assert intents.run_drc(ctx2).summary["marker_count"] == 3
    assert sorted(p.name for p in checkout.rglob("*")) == before


def test_drc_suite_passes_only_without_markers(checkout: Path) -> None:
    ok = intents.drc_suite(Ctx(checkout, {"suite": "drc", "deck": "builtin:mask_rules", "layouts": ["masks/clean.oas"],
                                          "params": RULES}))
    assert ok.summary["passed"] is True and ok.summary["marker_count"] == 0
    bad = intents.drc_suite(Ctx(checkout, {"deck": "builtin:mask_rules", "top_cell": "TOP", "params": RULES,
                                           "layouts": ["masks/dirty.gds"]}))
    assert bad.summary["passed"] is False and bad.summary["layouts"][0]["marker_count"] == 3
    assert len(bad.evidence) == 2


def test_intents_refuse_paths_leaving_the_checkout(checkout: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.gds").write_bytes((checkout / "masks" / "dirty.gds").read_bytes())
    (checkout / "masks" / "link.gds").symlink_to(tmp_path / "outside.gds")
    for layout, code in (("../outside.gds", "PATH_OUTSIDE_ROOTS"), ("masks/link.gds", "PATH_OUTSIDE_ROOTS"),
                         (str(tmp_path / "outside.gds"), "INVALID_TARGET")):  # absolute: not a checkout path
        with pytest.raises(DomeError) as info:
            intents.run_drc(Ctx(checkout, {"deck": "builtin:mask_rules", "layout": layout}))
        assert info.value.code == code
    with pytest.raises(KlayoutToolError) as info:
        intents.run_drc(Ctx(checkout, {"deck": "builtin:mask_rules", "layout": "masks/dirty.gds", "bogus": 1}))
    assert info.value.code == "INVALID_TARGET"


def test_cancellation_stops_a_running_deck(checkout: Path) -> None:
    (checkout / "slow.py").write_text("import time\ndef run(deck):\n    time.sleep(60)\n")
    ctx = Ctx(checkout, {"deck": "slow.py", "layout": "masks/clean.oas"})
    import threading
    import time
    threading.Timer(0.5, ctx.token.cancel, args=("test",)).start()
    t0 = time.monotonic()
    with pytest.raises(Exception) as info:
        intents.run_drc(ctx)
    assert getattr(info.value, "code", None) == "CANCELLED" and time.monotonic() - t0 < 10
