"""What a run costs the ledger: how often the finish stage reads the run's events, and
which transaction a task's ack goes in (the decisions still replay from the ledger)."""
from __future__ import annotations

import time

from coordinator import runstate as rs
from coordinator.runloop.finish import integration_finish
from coordinator.runloop.loop import RunLoop, make_decision
from coordinator.runstate import fold
from coordinator.scheduler import SchedulerPolicy
from coordinator.workqueue import load_work_queue
from registry.canonical import canonical_json
from tests.runloop.conftest import cmd_task, run_queue, write_queue


class Commits:
    """The ledger's commit hook (the one crash tests use), keeping each commit's topics."""

    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    def after_commit(self, topics) -> None:
        self.seen.append(list(topics))


def _tasks(n: int) -> list[dict]:
    return [cmd_task(f"t{i}", f"echo {i} > f{i}.txt") for i in range(n)]


def test_the_finish_stage_reads_the_whole_run_once_for_the_export(git_repo, ops_root, ledger_env, tmp_path):
    ledger = ledger_env[0]
    reads: list[tuple[int, bool]] = []  # (since, filtered by topic)
    events, matching = ledger.events, ledger.events_matching

    def counted_events(run_id, since=0, limit=None):
        got = events(run_id, since=since, limit=limit)
        if got:  # (the grant verifier looks before the run's first record: nothing there)
            reads.append((since, False))
        return got

    def counted_matching(run_id, since=0, limit=None, **kw):
        reads.append((since, True))
        return matching(run_id, since, limit, **kw)

    ledger.events, ledger.events_matching = counted_events, counted_matching
    q = write_queue(tmp_path, git_repo, _tasks(3), scheduling={"max_parallel": 2})
    _, out = run_queue(q, ops_root, ledger_env, sandbox="none", finish=integration_finish)
    assert out.status == "promoted"
    # the run's events, every topic: read once, by the export (it writes a file for each). The
    # finish stage asks for its records by topic: once at its start (integration records, derived
    # bases), once for the gate (from the last record the first read found)
    assert [r for r in reads if not r[1]] == [(0, False)], reads
    assert len([r for r in reads if r[1]]) == 2, reads


def test_an_ack_goes_in_the_next_wave_s_transaction_and_the_decisions_replay(git_repo, ops_root, ledger_env,
                                                                            tmp_path, monkeypatch):
    ledger = ledger_env[0]
    commits = Commits()
    ledger._crash = commits
    # an ack waits for its worker's process to be reaped; on a loaded machine the next wave can come
    # first. The test removes that race: before a wave it waits for every finished worker to be
    # reaped (the loop's own reap and supervise), so each ack is held when the next wave is made
    held_at_wave: list[int] = []
    schedule = RunLoop._schedule

    def counted_schedule(self):
        deadline = time.monotonic() + 30
        while any(neid in self.writer.state.ended for neid in self.live) and time.monotonic() < deadline:
            time.sleep(0.005)
            self._reap()
            self._supervise()
        held = len(self._acks)
        launched = schedule(self)
        if launched:
            held_at_wave.append(held)
        return launched

    monkeypatch.setattr(RunLoop, "_schedule", counted_schedule)
    q = write_queue(tmp_path, git_repo, _tasks(4), scheduling={"max_parallel": 1})
    _, out = run_queue(q, ops_root, ledger_env, sandbox="none")
    assert out.status == "completed"
    assert sum(c.count(rs.TASK_ACK) for c in commits.seen) == 4  # each task acked once
    waves = [c for c in commits.seen if rs.SCHEDULING_DECISION in c]
    assert len(waves) == len(held_at_wave) == 4, (commits.seen, held_at_wave)
    # the acks held when a wave is written are in that wave's commit, after its records
    assert held_at_wave == [0, 1, 1, 1], held_at_wave
    assert [c.count(rs.TASK_ACK) for c in waves] == held_at_wave, (commits.seen, held_at_wave)
    with_wave = [c for c in waves if rs.TASK_ACK in c]
    for c in with_wave:
        assert c.index(rs.TASK_ACK) > max(i for i, t in enumerate(c) if t == rs.TASK_DISPATCHED)
    events = ledger.events(out.run_id)
    graph, seed = load_work_queue(q).graph, events[0].payload["determinism_seed"]
    for d in (e for e in events if e.topic == rs.SCHEDULING_DECISION):
        again = make_decision(graph, fold([e for e in events if e.sequence < d.sequence]),
                              SchedulerPolicy(**d.payload["policy"]), seed, out.run_id)
        assert canonical_json(again) == canonical_json(d.payload), d.sequence
