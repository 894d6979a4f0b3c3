"""What a person sees during `dome run`: a live view on a TTY, plain lines otherwise.

Both go to stderr, so they show with `--json` too (stdout then carries only
the final JSON object). They cover every phase:

- tasks: waves, tasks by state, attempts, a progress bar per running attempt;
- integration: verify, plan, each apply, each validation with its phase
  (final = the whole stack, bisect = a prefix of it) and the proposals it
  covers, bisect and ejections, the gate and the promotion.

TTY: one block redrawn in place, every line cut to the terminal's width so a
narrow terminal never wraps (wrapping would break the redraw). Not a TTY: one
line per notable event and per integration decision.
"""
from __future__ import annotations

import shutil
import sys
import time
from typing import Any, TextIO

from .. import runstate as rs
from ..report.explain import Explainer
from ..scheduler import statuses

PLAIN_TOPICS = {rs.TASK_DISPATCHED, rs.TASK_COMPLETED, rs.TASK_FAILED, rs.TASK_TIMEOUT, rs.TASK_CANCELLED,
                rs.TASK_LOST, rs.SANDBOX_VIOLATION, rs.RUN_STARTED, rs.RUN_RESUMED, rs.RUN_FINISHED,
                rs.PATCH_SUBMITTED}
INTEGRATION_PREFIXES = ("integration.", "gate.", "promotion.", "resolver.")
REDRAW_S = 0.2


def _bar(fraction: float, width: int = 20) -> str:
    n = int(round(max(0.0, min(1.0, fraction)) * width))
    return "[" + "#" * n + "." * (width - n) + "]"


def columns(out: TextIO) -> int:
    """The width of the terminal `out` writes to (100 when it is not one)."""
    try:
        import os
        return os.get_terminal_size(out.fileno()).columns
    except (OSError, AttributeError, ValueError):
        return shutil.get_terminal_size((100, 24)).columns


def _event(rec: Any) -> dict[str, Any]:
    return {"topic": rec.topic, "sequence": rec.sequence, "node_id": rec.node_id, "payload": rec.payload}


def _decisions(explainer: Explainer, rec: Any) -> list[Any]:
    """The integration decisions a record adds. What the person sees must never
    stop the run: a record the fold cannot read shows nothing."""
    try:
        return explainer.feed(_event(rec))
    except Exception:  # noqa: BLE001 - display only
        return []


def make_view(out: TextIO = sys.stderr) -> "PlainView | LiveView":
    return LiveView(out) if getattr(out, "isatty", lambda: False)() else PlainView(out)


class PlainView:
    """One line per notable event: `<ts> #<seq> <topic> <node> <detail>`; one line
    per integration decision: `<ts> #<seq> integration <what happened>`."""

    def __init__(self, out: TextIO = sys.stderr) -> None:
        self.out = out
        self.explainer: Explainer | None = None
        self.quarters: dict[str, int] = {}  # attempt -> last quarter of progress printed

    def _print(self, line: str) -> None:
        print(line.rstrip(), file=self.out, flush=True)

    def on_record(self, rec: Any, loop: Any = None) -> None:
        if self.explainer is None:
            self.explainer = Explainer(rec.run_id if hasattr(rec, "run_id") else "")
        decisions = _decisions(self.explainer, rec)
        if rec.topic.startswith(INTEGRATION_PREFIXES) or (rec.topic == rs.WAVE_STARTED and decisions):
            for d in decisions:
                self._print(f"{rec.ts} #{rec.sequence} integration {d.text}")
            return
        if rec.topic == rs.TASK_PROGRESS:  # a long task says where it is at each quarter, no more
            quarter = int(4 * max(0.0, min(1.0, float(rec.payload.get("fraction") or 0))))
            if 0 < quarter < 4 and quarter > self.quarters.get(rec.node_execution_id or "", 0):
                self.quarters[rec.node_execution_id or ""] = quarter
                self._print(f"{rec.ts} #{rec.sequence} task.progress {rec.node_id} {25 * quarter}% "
                            f"{str(rec.payload.get('message', ''))[:60]}")
            return
        if rec.topic not in PLAIN_TOPICS:
            return
        p = rec.payload
        detail = ""
        if rec.topic == rs.TASK_DISPATCHED:
            detail = f"attempt {p.get('attempt')} ({p.get('kind')}) {rec.node_execution_id}"
        elif rec.topic == rs.TASK_COMPLETED:
            detail = p.get("outcome", "")
            if p.get("error"):
                detail += f" {p['error'].get('code')}"
        elif rec.topic in (rs.TASK_FAILED, rs.TASK_TIMEOUT, rs.TASK_CANCELLED, rs.TASK_LOST):
            detail = p.get("reason", "")
        elif rec.topic == rs.SANDBOX_VIOLATION:
            detail = p.get("kind", "")
        elif rec.topic == rs.PATCH_SUBMITTED:
            detail = f"{p.get('proposal_id')} {len(p.get('touched_files', []))} file(s)"
        elif rec.topic == rs.RUN_FINISHED:
            detail = p.get("status", "")
        node = f" {rec.node_id}" if rec.node_id else ""
        self._print(f"{rec.ts} #{rec.sequence} {rec.topic}{node} {detail}")

    def on_step(self, text: str) -> None:
        """A step that starts now and records its result later (a validation suite)."""
        self._print(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} integration {text}")

    def tick(self, loop: Any) -> None:
        pass

    def close(self) -> None:
        pass


class LiveView:
    """Redraws a compact block on a terminal at most 5 times a second."""

    def __init__(self, out: TextIO = sys.stderr) -> None:
        self.out = out
        self.progress: dict[str, tuple[str, float, str]] = {}
        self.last = 0.0
        self.lines = 0
        self.run_lines: list[str] = []
        self.explainer: Explainer | None = None
        self.integration: list[str] = []  # decisions so far, newest last
        self.step: tuple[str, float] | None = None  # what integration is doing now, since when

    def on_record(self, rec: Any, loop: Any = None) -> None:
        if self.explainer is None:
            self.explainer = Explainer("")
        decisions = _decisions(self.explainer, rec)
        if rec.topic.startswith(INTEGRATION_PREFIXES):
            self.integration += [d.text for d in decisions]
            if decisions:
                self.step = None
            self.draw(force=True)
        elif rec.topic == rs.TASK_DISPATCHED:
            self.progress[rec.node_execution_id] = (rec.node_id, 0.0, "starting")
        elif rec.topic == rs.TASK_PROGRESS and rec.node_execution_id in self.progress:
            self.progress[rec.node_execution_id] = (rec.node_id, float(rec.payload.get("fraction", 0)),
                                                    str(rec.payload.get("message", ""))[:40])
        elif rec.topic in rs.TERMINAL_ATTEMPT_TOPICS:
            self.progress.pop(rec.node_execution_id, None)

    def on_step(self, text: str) -> None:
        self.step = (text, time.monotonic())
        self.draw(force=True)

    def tick(self, loop: Any) -> None:
        if time.monotonic() - self.last < REDRAW_S:
            return
        st = loop.writer.state
        counts: dict[str, int] = {}
        for s in statuses(loop.graph, st).values():
            counts[s] = counts.get(s, 0) + 1
        done = counts.get("succeeded", 0) + counts.get("failed", 0) + counts.get("blocked", 0)
        total = len(loop.graph)
        width = columns(self.out)
        lines = [f"dome run {loop.run_id}  wave {st.waves}  attempts {st.total_attempts}",
                 f"{_bar(done / total if total else 1, max(10, min(30, width - 40)))} {done}/{total}  " +
                 "  ".join(f"{k} {v}" for k, v in sorted(counts.items()))]
        for neid, (nid, frac, msg) in sorted(self.progress.items())[:8]:
            lines.append(f"  {nid[:24]:<24} {_bar(frac, max(5, min(20, width - 30)))} {msg}")
        self.run_lines = lines
        self.draw()

    def _block(self) -> list[str]:
        lines = list(self.run_lines)
        if self.integration or self.step:
            lines.append(f"integration: {len(self.integration)} decision(s)")
            lines += [f"  {t}" for t in self.integration[-4:]]
            if self.step is not None:
                text, since = self.step
                lines.append(f"  ... {text} ({time.monotonic() - since:.0f} s)")
        return lines

    def draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < REDRAW_S:
            return
        self.last = now
        width = max(10, columns(self.out) - 1)
        lines = [line[:width] for line in self._block()]  # never wrap: the redraw counts lines
        if self.lines:
            self.out.write(f"\x1b[{self.lines}F\x1b[J")
        self.out.write("".join(line + "\n" for line in lines))
        self.out.flush()
        self.lines = len(lines)

    def close(self) -> None:
        """Leave the last block on screen as it is (the verdict follows it)."""
        self.lines = 0
