"""An event file's bytes: `render` copies the payload out of the record's own bytes
instead of encoding it again, and must give exactly the bytes of the generic
renderer (json.dumps of the record's export form) for every record, read back
from a real ledger or just built; when it cannot (floats the stdlib writes
differently, keys ordered differently by UTF-16, a record whose bytes are not
its fields), it falls back to the generic renderer."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import Ledger
from ledger.export import _Generic, _render_spliced, render, render_generic
from registry.signing import SigningKey

_KEY = SigningKey.generate()

_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1)
            | st.floats(allow_nan=False, allow_infinity=False) | _text)
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(_text, inner, max_size=4), max_leaves=20)
_payloads = st.dictionaries(_text, _values, max_size=6)


def _append_and_read(tmp: Path, payloads: list[dict]) -> tuple[list, list]:
    led = Ledger.open(None, tmp)
    try:
        built = led.append_batch("run-r", [_draft(p, i) for i, p in enumerate(payloads)], signer=_KEY)
        return built, led.events("run-r")
    finally:
        led.close()


def _draft(payload: dict, i: int):
    from ledger import EventDraft
    return EventDraft("task.progress", payload, node_id=f"n{i}", node_execution_id=f"n{i}:1", task_id=f"n{i}")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payloads=st.lists(_payloads, min_size=1, max_size=4))
def test_render_gives_the_generic_bytes_for_any_payload(tmp_path_factory, payloads) -> None:
    built, read = _append_and_read(tmp_path_factory.mktemp("ops"), payloads)
    for rec in [*built, *read]:  # as the writer holds them, and as a reader parses them
        assert render(rec) == render_generic(rec)


def test_awkward_values_render_the_same_bytes(tmp_path: Path) -> None:
    awkward = [
        {"tiny": 1e-05, "huge": 1e21, "big_int_float": float(2**60), "neg_zero": -0.0, "two": 2.0},
        {"\U0001f600": 1, "\ue000": 2, "a": 3},  # UTF-16 order differs from code point order
        {"ctl": "\x00\x01\x1f\x7f\u2028\b\f\n\r\t\"\\", "é": "ü", "emoji": "\U0001f600"},
        {"nested": {"payload_digest": "x", "payload": [1, {"run_id": "r"}]}, ",\"payload\":": 1},
        {},
    ]
    built, read = _append_and_read(tmp_path, awkward)
    for rec in [*built, *read]:
        assert render(rec) == render_generic(rec)
    # the plain cases take the short way (no float, no key above U+D7FF)
    plain = [r for r in read if r.payload in ({}, awkward[2], awkward[3])]
    assert len(plain) == 3 and all(_render_spliced(r) == render_generic(r) for r in plain)


def test_a_record_whose_bytes_are_not_its_fields_is_rendered_from_its_fields(tmp_path: Path) -> None:
    _, read = _append_and_read(tmp_path, [{"a": "one"}])
    rec = read[0]
    forged = dataclasses.replace(rec, record_bytes=rec.record_bytes.replace(b'"one"', b'"two"'))
    try:
        _render_spliced(forged)
        raise AssertionError("a payload that does not match its digest must not be copied")
    except _Generic:
        pass
    data = render(forged)
    assert data == render_generic(forged) and json.loads(data)["payload"] == {"a": "one"}
