"""Follow a ledger and feed its events through the one projection (`ledger.otel.Projector`)
to the live sinks: spans to the OpenTelemetry SDK, observations to Prometheus metrics,
events to JSON log lines. Reading the ledger (not hooking the writers) makes every
event count wherever it was written (run loop, gateway, integration, another process,
PostgreSQL), and costs the coordinator nothing when no sink is on: no follower starts.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable

from ledger.otel import Projector

POLL_S = 1.0  # a span reaches the collector within about a second; each poll is one ledger query


class Follower:
    """A thread that reads new events of `runs` (a run id, or None: every run) every POLL_S
    and hands them to the sinks; `close()` reads the rest, flushes the spans still open and
    stops. No sink error reaches the caller: `errors` counts them."""

    def __init__(self, ledger: Any, run_id: str | None, *, spans: Any = None, metrics: Any = None,
                 log: Callable[[Any], None] | None = None, poll_s: float = POLL_S, tapped: bool = False) -> None:
        self.ledger, self.run_id = ledger, run_id
        self.spans, self.metrics, self.log = spans, metrics, log
        self.poll_s = poll_s
        self.projectors: dict[str, Projector] = {}
        self.seen: dict[str, int] = {}
        self.errors = 0
        self.gap_reads = 0  # ledger reads a tapped follower needed (records the tap did not hear)
        # tapped: records are handed over by `tap` (the run loop's view), not polled from the ledger
        self.tapped: deque | None = deque() if tapped else None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="dome-telemetry", daemon=True)

    def start(self) -> "Follower":
        self.thread.start()
        return self

    def tap(self, rec: Any) -> None:
        """Hand over a record the caller just stored (the run loop's view hears every record
        it and integration append): the follower then reads the ledger only for a record it
        was not handed, so following a run costs no query per poll. Thread-safe, O(1)."""
        if self.tapped is not None:
            self.tapped.append(rec)

    def _drain(self) -> int:
        """Feed the tapped records in sequence order, filling a gap from the ledger."""
        n = 0
        q = self.tapped
        while q:
            rec = q.popleft()
            if self.run_id is None:
                self.run_id = rec.run_id
            if rec.run_id != self.run_id:
                continue
            seen = self.seen.get(rec.run_id, 0)
            if rec.sequence <= seen:
                continue
            batch = [rec]
            if rec.sequence > seen + 1:
                self.gap_reads += 1
                batch = self.ledger.events(rec.run_id, since=seen, limit=rec.sequence - seen - 1) + batch
            n += self._feed(rec.run_id, batch)
        return n

    def _runs(self) -> list[str]:
        return [self.run_id] if self.run_id is not None else list(self.ledger.run_ids())

    def poll(self) -> int:
        """Feed what is new; the number of events read."""
        if self.tapped is not None:
            return self._drain()
        n = 0
        for run_id in self._runs():
            events = self.ledger.events(run_id, since=self.seen.get(run_id, 0))
            n += self._feed(run_id, events)
        return n

    def _feed(self, run_id: str, events: list) -> int:
        if not events:
            return 0
        proj = self.projectors.get(run_id) or self.projectors.setdefault(run_id, Projector(run_id))
        closed, obs = [], []
        for ev in events:
            c, o = proj.feed(ev)
            closed += c
            obs += o
            if self.log is not None:
                self._safe(self.log, ev)
        self.seen[run_id] = events[-1].sequence
        if self.spans is not None and closed:
            self._safe(self.spans.emit, closed)
        if self.metrics is not None and obs:
            self._safe(self.metrics.observe, obs)
        return len(events)

    def _safe(self, fn: Callable[[Any], None], arg: Any) -> None:
        try:
            fn(arg)
        except Exception:  # noqa: BLE001 - telemetry never fails a run
            self.errors += 1

    def _loop(self) -> None:
        while not self.stop.wait(self.poll_s):
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - a busy or briefly locked ledger: try again next tick
                self.errors += 1

    def close(self) -> None:
        """Stop, read the rest, send the spans still open (a run that ended without its closing
        event), flush the exporter."""
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=10)
        try:
            self.poll()
            if self.tapped is not None and self.run_id is not None:  # anything stored after the last tap
                self._feed(self.run_id, self.ledger.events(self.run_id, since=self.seen.get(self.run_id, 0)))
        except Exception:  # noqa: BLE001
            self.errors += 1
        if self.spans is not None:
            for proj in self.projectors.values():
                self._safe(self.spans.emit, proj.open_spans())
            self._safe(lambda _: self.spans.close(), None)
