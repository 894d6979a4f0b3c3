"""Reading a run's events for a few topics: the database leaves the others out, with the
same records, in the same order, as a filter over the whole run (SQLite and PostgreSQL)."""
from __future__ import annotations

from pathlib import Path

import pytest

from ledger import EventDraft, Ledger
from ledger.paging import iter_events
from tests.ledger.pg import pg_url  # noqa: F401 - fixture

RUN = "run-f"
TOPICS = ["integration.checkpoint", "task.base_derived", "integration.apply_result", "grant.call",
          "integrationx.other", "gate.computed", "task.completed", "integration_y.z", "promotion.computed",
          "task.base_derived_not", "integration.proposal_verified"]


def _fill(led: Ledger) -> None:
    led.append_batch(RUN, [EventDraft(TOPICS[i % len(TOPICS)], {"i": i}) for i in range(53)])
    led.append_batch("other-run", [EventDraft("integration.checkpoint", {"i": -1})])


def _check(led: Ledger) -> None:
    every = led.events(RUN)
    want = [e for e in every if e.topic == "task.base_derived"
            or e.topic.split(".", 1)[0] in ("integration", "gate", "promotion")]
    assert {e.topic for e in want} == {"integration.checkpoint", "task.base_derived", "integration.apply_result",
                                       "gate.computed", "promotion.computed", "integration.proposal_verified"}
    for page in (1, 4, 1000):
        got = list(iter_events(led, RUN, page=page, topics={"task.base_derived"},
                               prefixes=("integration", "gate", "promotion")))
        assert [(e.sequence, e.topic, e.payload, e.record_digest) for e in got] == \
            [(e.sequence, e.topic, e.payload, e.record_digest) for e in want], page
    since = want[3].sequence
    assert [e.sequence for e in iter_events(led, RUN, since=since, prefixes=("gate",))] == \
        [e.sequence for e in want if e.sequence > since and e.topic == "gate.computed"]
    assert list(iter_events(led, RUN, topics=(), prefixes=())) == []


class _Plain:
    """An event source with only `events` (as a test fake or another store may be)."""

    def __init__(self, led: Ledger) -> None:
        self.led = led

    def events(self, run_id: str, since: int = 0, limit: int | None = None):
        return self.led.events(run_id, since=since, limit=limit)


def test_filtered_read_on_sqlite_matches_a_filter_over_every_event(ops_root: Path) -> None:
    with Ledger.open(None, ops_root) as led:
        _fill(led)
        _check(led)
        plain = _Plain(led)  # the same answer where the source cannot filter: iter_events filters
        assert [e.sequence for e in iter_events(plain, RUN, page=3, topics={"task.base_derived"},
                                                prefixes=("integration",))] == \
            [e.sequence for e in led.events(RUN)
             if e.topic == "task.base_derived" or e.topic.startswith("integration.")]


@pytest.mark.slow
def test_filtered_read_on_postgres_matches_a_filter_over_every_event(pg_url: str, ops_root: Path) -> None:  # noqa: F811
    from ledger import migrate
    from ledger.engine import make_engines
    engines = make_engines(pg_url)
    migrate.downgrade(engines.write, "base") if migrate.current_revision(engines.write) else None
    engines.dispose()
    with Ledger.open(pg_url, ops_root) as led:
        _fill(led)
        _check(led)
