"""The task projection's files (task.result.json, the winning proposal) are indented
JSON with sorted keys: `render_json` must give exactly `json.dumps(obj, indent=2,
sort_keys=True)` and a newline, which `dome verify` compares byte for byte."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.runloop.export import render_json

_scalars = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner)
                       | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=25)


def _stdlib(obj) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("utf-8")


@settings(max_examples=400, deadline=None)
@given(obj=_values)
def test_render_json_is_the_stdlib_indented_form(obj) -> None:
    assert render_json(obj) == _stdlib(obj)


def test_render_json_edge_values() -> None:
    for obj in [{}, [], {"a": {}, "b": []}, {"x": float("nan"), "y": float("inf"), "z": -float("inf")},
                {"\U0001f600": "\x00\u2028", "é": [1.5, -0.0, 1e-05, 1e21, True, False, None]},
                {"t": (1, [2, (3,)])}, {1: "int key"}, 7, "s", None]:
        assert render_json(obj) == _stdlib(obj)
