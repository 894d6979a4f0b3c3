"""The C-encoder fast path of registry.canonical.canonical_json is byte-identical
to the RFC 8785 reference implementation for every JSON value (or both refuse)."""
from __future__ import annotations

import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.canonical import canonical_json
from registry.errors import CanonicalizationError

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_json = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=6), children, max_size=5),
    max_leaves=30,
)


def _reference(value):
    try:
        return rfc8785.dumps(value)
    except Exception:  # noqa: BLE001 - any refusal counts as a refusal
        return None


def _ours(value):
    try:
        return canonical_json(value)
    except CanonicalizationError:
        return None


@settings(max_examples=600, deadline=None)
@given(_json)
def test_fast_path_matches_rfc8785_reference(value) -> None:
    assert _ours(value) == _reference(value)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(alphabet=st.characters(min_codepoint=0xD000, max_codepoint=0x1F700,
                                                      blacklist_categories=("Cs",)), max_size=3),
                       st.integers(0, 9), max_size=6))
def test_non_ascii_keys_sort_by_utf16_code_units(value) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


def test_edge_cases_take_the_reference_path() -> None:
    assert canonical_json({"b": 1.0, "a": [1e21, 1e-7]}) == b'{"a":[1e+21,1e-7],"b":1}'
    assert canonical_json({"\u20ac": 1, "\U0001f600": 2, "\ufb01": 3}) == rfc8785.dumps(
        {"\u20ac": 1, "\U0001f600": 2, "\ufb01": 3})
    assert canonical_json("\u0000\u001f\"\\\u007f") == b'"\\u0000\\u001f\\"\\\\\x7f"'
    for bad in (2**53, {1: 2}, "\ud800", float("nan")):
        try:
            canonical_json(bad)
        except CanonicalizationError:
            continue
        raise AssertionError(f"{bad!r} was accepted")


_integral_floats = st.integers(min_value=-(2**53) - 4, max_value=2**53 + 4).map(float) | st.sampled_from(
    [0.0, -0.0, 1.0, -1.0, 1e15, 1e16, 9007199254740991.0, 9007199254740992.0])


@settings(max_examples=400, deadline=None)
@given(st.recursive(_integral_floats | st.floats(allow_nan=False, allow_infinity=False) | st.integers(-5, 5),
                    lambda children: st.lists(children, max_size=4)
                    | st.dictionaries(st.text(max_size=4), children, max_size=4), max_leaves=20))
def test_integral_floats_take_the_fast_path_byte_identically(value) -> None:
    """Geometry results are full of 2.0 and -0.0: written as the integers ECMAScript prints, same bytes."""
    assert _ours(value) == _reference(value)


def test_integral_floats_are_not_left_to_the_reference_path(monkeypatch) -> None:
    import registry.canonical as canonical

    def refuse(value):
        raise AssertionError("reference path used")

    monkeypatch.setattr(canonical.rfc8785, "dumps", refuse)
    assert canonical_json({"box_um": {"left": 0.0, "right": 20.0, "top": -0.0}, "w": 0.5}) == \
        b'{"box_um":{"left":0,"right":20,"top":0},"w":0.5}'
