"""Property checks of query_region against a brute-force scan of the same layout."""
from __future__ import annotations

import klayout.db as kdb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker_sdk.klayout_tools.sessions import SessionStore

from .conftest import Tools


def _brute(path: str, box: kdb.Box) -> tuple[int, int]:
    ly = kdb.Layout()
    ly.read(path)
    top = ly.cell("TOP")
    shapes = texts = 0
    for li in ly.layer_indexes():
        for it in top.begin_shapes_rec(li).each():
            bb = it.shape().bbox().transformed(it.trans())
            if bb.touches(box):
                if it.shape().is_text():
                    texts += 1
                else:
                    shapes += 1
    return shapes, texts


coord = st.integers(min_value=-20_000, max_value=560_000)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(x0=coord, y0=coord, w=st.integers(1, 300_000), h=st.integers(1, 200_000), k=st.integers(0, 40))
def test_counts_match_brute_force_and_truncation_adds_up(kl_env, x0, y0, w, h, k) -> None:
    tools = Tools(SessionStore())
    sid = tools.open(kl_env["gds"], top_cell="TOP")["session_id"]
    box = {"left": x0 / 1000, "bottom": y0 / 1000, "right": (x0 + w) / 1000, "top": (y0 + h) / 1000}
    r = tools.query_region({"session_id": sid, "box": box, "max_shapes": k})
    shapes, texts = _brute(str(kl_env["gds"]), kdb.Box(x0, y0, x0 + w, y0 + h))
    assert (r["summary"]["shape_count"], r["summary"]["text_count"]) == (shapes, texts)
    assert len(r["shapes"]) == min(k, shapes) and r["truncation"]["shapes_dropped"] == shapes - len(r["shapes"])
    assert len(r["texts"]) == min(k, texts) and r["truncation"]["texts_dropped"] == texts - len(r["texts"])
    full = tools.query_region({"session_id": sid, "box": box, "max_shapes": 1000})
    assert r["shapes"] == full["shapes"][:k]  # truncation keeps a prefix of the full ordering
