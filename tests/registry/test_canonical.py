"""RFC 8785 (JCS) canonical JSON: properties checked with hypothesis against
small reference implementations written from the RFC's text, plus the RFC's
own examples byte for byte."""
from __future__ import annotations

import json
import random
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.canonical import (CANONICALIZATION, canonical_json, digest_bytes, digest_json,
                                parse_digest)
from registry.errors import CanonicalizationError

MAX_SAFE = 2**53 - 1

# Text without lone surrogates (those are not Unicode scalar values, so not JSON text).
text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)
scalars = (st.none() | st.booleans() | st.integers(-MAX_SAFE, MAX_SAFE)
           | st.floats(allow_nan=False, allow_infinity=False) | text)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(text, children, max_size=5),
    max_leaves=30,
)


def as_doubles(data: bytes) -> Any:
    """Parse JSON the way RFC 8785 assumes: every number is an IEEE 754 double
    (integers in the safe range stay exact ints)."""
    def parse_int(s: str) -> Any:
        value = int(s)
        return value if abs(value) <= MAX_SAFE else float(s)
    return json.loads(data, parse_int=parse_int)


def shuffled(value: Any, rnd: random.Random) -> Any:
    """The same JSON value with every object's key insertion order permuted."""
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rnd) for v in value]
    return value


# ---- reference implementations from the RFC's text (independent of the library)

def es6_number(x: float) -> str:
    """ECMAScript Number::toString (ECMA-262 7.1.12.1), as RFC 8785 §3.2.2.3 requires."""
    if x == 0:
        return "0"
    if x < 0:
        return "-" + es6_number(-x)
    mantissa, _, exp = repr(float(x)).partition("e")
    int_part, _, frac = mantissa.partition(".")
    digits = int_part + frac
    n = len(int_part) + (int(exp) if exp else 0)
    stripped = digits.lstrip("0")
    n -= len(digits) - len(stripped)
    s = stripped.rstrip("0")
    k = len(s)
    if k <= n <= 21:
        return s + "0" * (n - k)
    if 0 < n <= 21:
        return s[:n] + "." + s[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + s
    e = n - 1
    sign = "+" if e >= 0 else "-"
    head = s if k == 1 else s[0] + "." + s[1:]
    return f"{head}e{sign}{abs(e)}"


SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def jcs_string(s: str) -> str:
    """RFC 8785 §3.2.2.2: JSON.stringify string escaping."""
    out = []
    for ch in s:
        if ch in SHORT:
            out.append(SHORT[ch])
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def utf16_key(k: str) -> bytes:
    """Sort key of RFC 8785 §3.2.3: compare UTF-16 code units."""
    return k.encode("utf-16-be")


# ---- properties

@given(json_values, st.randoms())
def test_key_order_does_not_change_bytes(value: Any, rnd: random.Random) -> None:
    assert canonical_json(shuffled(value, rnd)) == canonical_json(value)


@given(json_values)
def test_round_trip_gives_the_same_value(value: Any) -> None:
    assert as_doubles(canonical_json(value)) == value


@given(json_values)
def test_canonicalization_is_idempotent(value: Any) -> None:
    once = canonical_json(value)
    assert canonical_json(as_doubles(once)) == once


def jcs_reference(value: Any) -> str:
    """A whole RFC 8785 serializer from the pieces above."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return es6_number(value)
    if isinstance(value, str):
        return jcs_string(value)
    if isinstance(value, list):
        return "[" + ",".join(jcs_reference(v) for v in value) + "]"
    keys = sorted(value, key=utf16_key)
    return "{" + ",".join(jcs_string(k) + ":" + jcs_reference(value[k]) for k in keys) + "}"


@given(json_values)
def test_matches_a_reference_serializer_written_from_the_rfc(value: Any) -> None:
    assert canonical_json(value) == jcs_reference(value).encode("utf-8")


# The fast path against the library on arbitrary values: test_canonical_fastpath.py.


@settings(max_examples=500)
@given(st.floats(min_value=1e-5, max_value=1e17) | st.floats(min_value=-1e17, max_value=-1e-5)
       | st.sampled_from([1e-4, 0.0001000001, 9999999999999998.0, 1e16, 1e16 - 2, 0.5, 3.0, 1e-4 * 0.999]))
def test_floats_near_the_fast_path_boundaries(x: float) -> None:
    assert canonical_json({"x": x, "l": [x]}) == ('{"l":[%s],"x":%s}' % (es6_number(x), es6_number(x))).encode()


@settings(max_examples=2000)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_finite_double_serializes_as_ecmascript_does(x: float) -> None:
    assert canonical_json(x).decode() == es6_number(x)


@given(st.integers(-MAX_SAFE, MAX_SAFE))
def test_safe_integers_serialize_as_decimal(n: int) -> None:
    assert canonical_json(n) == str(n).encode()


@given(text)
def test_strings_escape_exactly_as_the_rfc_says(s: str) -> None:
    assert canonical_json(s).decode("utf-8") == jcs_string(s)


@given(st.dictionaries(text, st.integers(0, 9), min_size=2, max_size=8))
def test_keys_sort_by_utf16_code_units(d: dict[str, int]) -> None:
    parsed = json.loads(canonical_json(d), object_pairs_hook=lambda pairs: [k for k, _ in pairs])
    assert parsed == sorted(d, key=utf16_key)


@given(json_values)
def test_digest_is_sha256_of_the_canonical_bytes(value: Any) -> None:
    import hashlib
    d = digest_json(value)
    assert d == "sha256:" + hashlib.sha256(canonical_json(value)).hexdigest() == digest_bytes(canonical_json(value))
    assert parse_digest(d) == ("sha256", d[7:])


# ---- the RFC's examples and edge cases, byte for byte

def _double(hex16: str) -> float:
    return struct.unpack(">d", bytes.fromhex(hex16))[0]


@pytest.mark.parametrize("ieee,expected", [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
])
def test_rfc8785_appendix_b_numbers(ieee: str, expected: str) -> None:
    assert canonical_json(_double(ieee)) == expected.encode()
    assert es6_number(_double(ieee)) == expected


@pytest.mark.parametrize("value,expected", [
    (1e21, "1e+21"), (1e-7, "1e-7"), (-0.0, "0"), (5e-324, "5e-324"),
    (1.7976931348623157e308, "1.7976931348623157e+308"), (0.000001, "0.000001"),
    (123456789012345680000.0, "123456789012345680000"), (1e20, "100000000000000000000"),
    (4.50, "4.5"), (2e-3, "0.002"), (1e30, "1e+30"), (1.0, "1"),
])
def test_number_edge_cases(value: float, expected: str) -> None:
    assert canonical_json(value) == expected.encode()


def test_rfc8785_section_3_2_2_example() -> None:
    source = ('{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
              ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
              ' "literals": [null, true, false]}')
    expected = ('{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
                '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}')
    assert canonical_json(json.loads(source)) == expected.encode("utf-8")


def test_rfc8785_section_3_2_3_sorting_example() -> None:
    value = {"\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh",
             "1": "One", "\U0001F600": "Emoji: Grinning Face", "\u0080": "Control",
             "\u00f6": "Latin Small Letter O With Diaeresis"}
    order = json.loads(canonical_json(value), object_pairs_hook=lambda pairs: [k for k, _ in pairs])
    assert order == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001F600", "\ufb33"]
    # Code point order would put U+1F600 after U+FB33; UTF-16 order puts it before.
    assert sorted(["\ufb33", "\U0001F600"]) == ["\ufb33", "\U0001F600"]


def test_string_escapes() -> None:
    all_controls = "".join(chr(c) for c in range(0x20))
    out = canonical_json(all_controls).decode()
    assert out == ('"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r'
                   '\\u000e\\u000f\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018'
                   '\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f"')
    assert canonical_json("/") == b'"/"'
    assert canonical_json("\u007f\u00e9\u20ac\U0001F600") == '"\u007f\u00e9\u20ac\U0001F600"'.encode("utf-8")
    assert canonical_json('"\\') == b'"\\"\\\\"'


@pytest.mark.parametrize("bad", [
    float("nan"), float("inf"), float("-inf"), [1, float("nan")], {"a": float("inf")},
    2**53, -(2**53), 10**30, "\ud800", {"\udfff": 1}, {1: "int key"}, b"bytes", {1, 2}, object(),
])
def test_values_outside_json_are_refused(bad: Any) -> None:
    with pytest.raises(CanonicalizationError) as info:
        canonical_json(bad)
    assert info.value.code == "CANONICALIZATION_ERROR"


def test_deep_nesting_is_a_canonicalization_error_not_a_crash() -> None:
    value: Any = 0
    for _ in range(100_000):
        value = [value]
    with pytest.raises(CanonicalizationError):
        canonical_json(value)


@pytest.mark.parametrize("bad", ["sha256:" + "A" * 64, "sha1:" + "a" * 40, "sha256:" + "a" * 63, "a" * 64, ""])
def test_parse_digest_refuses_anything_but_sha256_hex(bad: str) -> None:
    with pytest.raises(CanonicalizationError):
        parse_digest(bad)


def test_canonicalization_id_is_the_one_schemas_accept() -> None:
    from registry import schema_store
    assert schema_store.load_schema("common")["$defs"]["canonicalization"]["enum"] == [CANONICALIZATION]
