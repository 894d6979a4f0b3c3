"""The ledger's clock formats the date and time of day once per second: its stamps are
exactly what `datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")` gives for the
same instant (microseconds rounded down), across second, day and year boundaries, and the
run loop's and integration stage's stamps are that same clock."""
from __future__ import annotations

from datetime import datetime, timezone
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import store


def _reference(ns: int) -> str:
    seconds, micros = divmod(ns // 1000, 1_000_000)
    dt = datetime.fromtimestamp(seconds, timezone.utc).replace(microsecond=micros)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 4_102_444_800 * 10**9), min_size=1, max_size=5))
def test_utc_now_is_the_datetime_formatting_of_the_same_instant(instants) -> None:
    for ns in sorted(instants) + [instants[0], instants[0] + 999, instants[0] + 10**9 - 1]:
        with mock.patch.object(store.time, "time_ns", return_value=ns):
            assert store.utc_now() == _reference(ns)


def test_a_second_boundary_and_a_year_boundary() -> None:
    new_year = 1_798_761_600 * 10**9  # 2027-01-01T00:00:00Z
    for ns in (new_year - 1_000, new_year, new_year + 1_000, new_year - 1):
        with mock.patch.object(store.time, "time_ns", return_value=ns):
            assert store.utc_now() == _reference(ns)
    assert _reference(new_year - 1_000) == "2026-12-31T23:59:59.999999Z"


def test_the_run_loop_and_integration_stamps_are_the_ledgers_clock() -> None:
    from coordinator.integration import finish
    from coordinator.runloop import manifest
    assert manifest.utc_stamp is store.utc_now and finish.utc_now is store.utc_now
    stamp = store.utc_now()
    assert datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ")
