"""How many rejected gateway calls the ledger records (pure; the gateway does the I/O).

A caller with a forged, spent or foreign grant can send rejected calls as
fast as the socket takes them; recording each one would let it grow the
ledger without bound. Per fixed window of `window_s` seconds:

- the first `per_subject` rejections of one subject (the attempt a call names,
  else the token's digest) and at most `aggregate` rejections in all are
  recorded in full (`grant.rejected`, as before);
- the first rejection past a limit writes one `grant.rejections_limited`
  event (the subject, or `*` for the aggregate limit), and that rejection and
  every later one of the subject in the window are answered RATE_LIMITED
  (retry after the window ends) and not recorded one by one;
- when a window with refused rejections ends, one `grant.rejections_summary`
  event counts them (while the run is still open).

So a window adds at most `aggregate` + `aggregate // per_subject` + 2 events.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from registry.errors import DomeError

LIMITED_TOPIC = "grant.rejections_limited"
SUMMARY_TOPIC = "grant.rejections_summary"
AGGREGATE = "*"


class RateLimited(DomeError):
    code = "RATE_LIMITED"
    retry = "light"


class Verdict(Enum):
    RECORD = "record"          # record the rejection in full and answer its own error
    LIMIT = "limit"            # the first past a limit: write the limited event, answer RATE_LIMITED
    REFUSE = "refuse"          # already limited: answer RATE_LIMITED, write nothing


@dataclass
class RejectionLimiter:
    per_subject: int = 10
    aggregate: int = 50
    window_s: float = 60.0
    window_start: float = 0.0
    recorded: dict[str, int] = field(default_factory=dict)
    limited: set[str] = field(default_factory=set)
    refused: dict[str, int] = field(default_factory=dict)  # code -> count not recorded one by one

    @property
    def total(self) -> int:
        return sum(self.recorded.values())

    def roll(self, now: float) -> dict[str, int] | None:
        """Start a new window if this one is over; return the refused counts of the one that ended."""
        if now < self.window_start + self.window_s:
            return None
        ended = dict(self.refused)
        self.window_start = now - (now - self.window_start) % self.window_s if self.window_start else now
        self.recorded, self.limited, self.refused = {}, set(), {}
        return ended or None

    def judge(self, subject: str, code: str, now: float) -> Verdict:
        """What to do with one rejection (after `roll`)."""
        if subject in self.limited or AGGREGATE in self.limited:
            self.refused[code] = self.refused.get(code, 0) + 1
            return Verdict.REFUSE
        if self.recorded.get(subject, 0) >= self.per_subject:
            self.limited.add(subject)
        elif self.total >= self.aggregate:
            self.limited.add(AGGREGATE)
        else:
            self.recorded[subject] = self.recorded.get(subject, 0) + 1
            return Verdict.RECORD
        self.refused[code] = self.refused.get(code, 0) + 1
        return Verdict.LIMIT

    def retry_after(self, now: float) -> float:
        return round(max(0.0, self.window_start + self.window_s - now), 3)
