"""Read a run's events a page at a time.

`EventSource.events(run_id)` returns the whole run as one list: at 10,000
tasks that is some 140,000 records and gigabytes of Python objects. A reader
that looks at each event once (an export, a fold, a scan for a few topics)
walks `iter_events` instead, and holds one page of records at a time.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Collection, Iterator

from .protocols import EventSource

PAGE = 1000
"""Records per read: big enough that a page's query costs little beside its rows
(a run writes about 14 records, 47 KB, per task: a page is some 70 tasks)."""


def sequence_of(ev: Any) -> int:
    """An event's sequence (a stored record, or its mapping form)."""
    return int(ev["sequence"] if isinstance(ev, Mapping) else ev.sequence)


def iter_events(source: EventSource, run_id: str, *, since: int = 0, page: int | None = None,
                topics: Collection[str] | None = None, prefixes: Collection[str] | None = None) -> Iterator[Any]:
    """The run's events with sequence > since, in sequence order, read `page` (PAGE) at a
    time. Events appended while the walk is under way are included when they come after it.
    With `topics` or `prefixes`, only the events whose topic is one of `topics` or starts with
    one of `prefixes` and a dot: left out by the database when the source can
    (`events_matching`), else here."""
    page = PAGE if page is None else page
    if page < 1:
        raise ValueError("page must be at least 1")
    if topics is None and prefixes is None:
        read = source.events
    else:
        tops, pres = frozenset(topics or ()), tuple(prefixes or ())
        matching = getattr(source, "events_matching", None)
        if matching is not None:
            def read(run_id: str, since: int, limit: int) -> Any:
                return matching(run_id, since, limit, topics=sorted(tops), prefixes=pres)
        else:
            yield from (e for e in iter_events(source, run_id, since=since, page=page)
                        if _matches(_topic(e), tops, pres))
            return
    while True:
        batch = read(run_id, since=since, limit=page)
        full = len(batch) == page
        if batch:
            since = sequence_of(batch[-1])
        yield from batch
        del batch  # one page in memory, not two: this one goes before the next is read
        if not full:
            return


def _topic(ev: Any) -> str:
    return str(ev["topic"] if isinstance(ev, Mapping) else ev.topic)


def _matches(topic: str, topics: frozenset[str], prefixes: tuple[str, ...]) -> bool:
    return topic in topics or topic.split(".", 1)[0] in prefixes and "." in topic
