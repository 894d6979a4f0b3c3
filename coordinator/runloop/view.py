"""What a person sees during `dome run`: a live view on a TTY, plain lines otherwise.

TTY: one status block redrawn in place (waves, tasks by state, attempts,
a progress bar per running attempt). Not a TTY: one line per notable event
(dispatch, completion, failure, timeout, cancellation, violation). `--json`
uses no view; the CLI prints one final JSON object.
"""
from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from .. import runstate as rs
from ..scheduler import statuses

PLAIN_TOPICS = {rs.TASK_DISPATCHED, rs.TASK_COMPLETED, rs.TASK_FAILED, rs.TASK_TIMEOUT, rs.TASK_CANCELLED,
                rs.TASK_LOST, rs.SANDBOX_VIOLATION, rs.RUN_STARTED, rs.RUN_RESUMED, rs.RUN_FINISHED,
                rs.PATCH_SUBMITTED}


def _bar(fraction: float, width: int = 20) -> str:
    n = int(round(max(0.0, min(1.0, fraction)) * width))
    return "[" + "#" * n + "." * (width - n) + "]"


class PlainView:
    def __init__(self, out: TextIO = sys.stderr) -> None:
        self.out = out

    def on_record(self, rec: Any, loop: Any) -> None:
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
        print(f"{rec.ts} #{rec.sequence} {rec.topic}{node} {detail}".rstrip(), file=self.out, flush=True)

    def tick(self, loop: Any) -> None:
        pass


class LiveView:
    """Redraws a compact block on a terminal at most 5 times a second."""

    def __init__(self, out: TextIO = sys.stderr) -> None:
        self.out = out
        self.progress: dict[str, tuple[str, float, str]] = {}
        self.last = 0.0
        self.lines = 0

    def on_record(self, rec: Any, loop: Any) -> None:
        if rec.topic == rs.TASK_DISPATCHED:
            self.progress[rec.node_execution_id] = (rec.node_id, 0.0, "starting")
        elif rec.topic == rs.TASK_PROGRESS and rec.node_execution_id in self.progress:
            self.progress[rec.node_execution_id] = (rec.node_id, float(rec.payload.get("fraction", 0)),
                                                    str(rec.payload.get("message", ""))[:40])
        elif rec.topic in rs.TERMINAL_ATTEMPT_TOPICS:
            self.progress.pop(rec.node_execution_id, None)

    def tick(self, loop: Any) -> None:
        now = time.monotonic()
        if now - self.last < 0.2:
            return
        self.last = now
        st = loop.writer.state
        counts: dict[str, int] = {}
        for s in statuses(loop.graph, st).values():
            counts[s] = counts.get(s, 0) + 1
        done = counts.get("succeeded", 0) + counts.get("failed", 0) + counts.get("blocked", 0)
        total = len(loop.graph)
        lines = [f"dome run {loop.run_id}  wave {st.waves}  attempts {st.total_attempts}",
                 f"{_bar(done / total if total else 1, 30)} {done}/{total}  " +
                 "  ".join(f"{k} {v}" for k, v in sorted(counts.items()))]
        for neid, (nid, frac, msg) in sorted(self.progress.items())[:8]:
            lines.append(f"  {nid[:24]:<24} {_bar(frac)} {msg}")
        if self.lines:
            self.out.write(f"\x1b[{self.lines}F\x1b[J")
        self.out.write("\n".join(lines) + "\n")
        self.out.flush()
        self.lines = len(lines)
