"""Read-only gateway calls' charges are committed in groups: one transaction for many
concurrent calls, each call answered only once the commit holding its charge is durable,
so the ledger-backed budget is exact after a crash (never short of the answered calls)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from coordinator.grants import GrantVerifier
from coordinator.group_commit import GroupCommitter
from ledger.crashpoint import ENV, EXIT_STATUS
from registry.canonical import digest_json
from registry.grant_errors import GrantError
from tests.conftest import REPO_ROOT
from tests.grants.conftest import AUD, RUN, T0, WAVE, World, open_ledger

CALL = dict(run_id=RUN, wave_id=WAVE, audience=AUD, now=T0 + 5)


def _grouped(world: World) -> GrantVerifier:
    return GrantVerifier(world.keyring, world.ledger, registry=world.registry, group_commit=True)


def _charges(world: World, profile_id: str) -> list:
    return [e for e in world.events() if e.topic == "grant.call" and e.payload["profile_id"] == profile_id]


def test_concurrent_read_calls_share_commits_and_each_is_charged_once(world: World) -> None:
    v = _grouped(world)
    g = world.issue(caps=("read",))
    n = 40
    answered: list[int] = []
    barrier = threading.Barrier(n)

    def call(i: int) -> None:
        barrier.wait()
        with v.authorize(g.token, method="read_file", args={"path": f"f{i}"}, **CALL):
            pass
        answered.append(i)  # the with block returned: the charge is durable (checked below)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    v.close()
    charges = _charges(world, g.profile_id)
    assert sorted(answered) == list(range(n)) and len(charges) == n
    assert {c.payload["args_digest"] for c in charges} == {digest_json({"path": f"f{i}"}) for i in range(n)}
    assert all(c.payload["outcome"] == "ok" and not c.payload["spent_jti"] for c in charges)
    assert v.group.records == n and v.group.commits < n  # grouped: fewer commits than calls
    assert v.usage(g.profile_id)["calls_total"] == n
    fresh = GrantVerifier(world.keyring, world.ledger, registry=world.registry)  # the ledger-backed budget
    fresh._ensure_run(RUN)
    assert fresh.usage(g.profile_id)["calls_total"] == n


def test_a_grant_revoked_in_the_ledger_is_refused_at_the_group_commit(world: World) -> None:
    """The revocation is written behind this verifier's back (another process): the group
    transaction's check refuses the call, which is then not charged, and leaves one rejection."""
    v = _grouped(world)
    g = world.issue(caps=("read",))
    with v.authorize(g.token, method="read_file", args={"path": "a"}, **CALL):
        pass
    world.ledger.revoke(jti=g.jti, run_id=RUN, reason="elsewhere")
    ran = []
    with pytest.raises(GrantError) as info:
        with v.authorize(g.token, method="read_file", args={"path": "b"}, **CALL):
            ran.append(1)
    assert info.value.code == "GRANT_REVOKED"
    assert len(_charges(world, g.profile_id)) == 1 and v.usage(g.profile_id)["calls_total"] == 1
    assert [e.payload["code"] for e in world.events() if e.topic == "grant.rejected"] == ["GRANT_REVOKED"]
    with pytest.raises(GrantError):  # and from then on refused before anything runs
        with v.authorize(g.token, method="read_file", args={"path": "c"}, **CALL):
            ran.append(2)
    assert ran == [1]
    v.close()


def test_a_failing_read_action_is_charged_as_failed(world: World) -> None:
    v = _grouped(world)
    g = world.issue(caps=("read",))
    with pytest.raises(ZeroDivisionError):
        with v.authorize(g.token, method="read_file", args={"path": "a"}, **CALL):
            1 / 0
    (c,) = _charges(world, g.profile_id)
    assert c.payload["outcome"] == "failed"
    v.close()


def test_a_write_is_never_grouped(world: World) -> None:
    v = _grouped(world)
    g = world.issue()
    with v.authorize(g.token, method="complete_task", idempotency_key="k-000000001",
                     args={"outcome": "succeeded"}, **CALL) as call:
        assert call.tx is not None  # its own transaction, with the action in it
        call.tx.append(RUN, "task.completed", {"outcome": "succeeded"})
    assert v.group.commits == 0
    v.close()


def test_a_batch_that_fails_to_commit_fails_every_call_in_it(tmp_path: Path) -> None:
    class Broken:
        def transaction(self):
            raise OSError("disk gone")

    gc = GroupCommitter(Broken())
    with pytest.raises(OSError):
        gc.submit(lambda tx: None)
    gc.close()


# ---- crashes: kill the coordinator around the group commit --------------------------------
CHILD = r"""
import os, sys, threading, time
from pathlib import Path
from coordinator.grants import GrantVerifier
from coordinator.keys import load_keyring, load_or_create_signing_key
from tests.grants.conftest import AUD, RUN, T0, WAVE, World, open_ledger, small_budget_registry

ops, mode = Path(sys.argv[1]), sys.argv[2]
ledger = open_ledger(ops)
reg = small_budget_registry()
w = World(key=load_or_create_signing_key(ops), keyring=load_keyring(ops), ledger=ledger, registry=reg,
          verifier=None)
g = w.issue(caps=("read",))
v = GrantVerifier(w.keyring, ledger, registry=reg, group_commit=True)
if mode == "stall":  # the third group transaction never commits: the test kills the process in it
    real, seen = ledger.transaction, [0]
    from contextlib import contextmanager
    @contextmanager
    def transaction():
        with real() as tx:
            yield tx
            seen[0] += 1
            if seen[0] >= 3:
                os.write(1, b"STALLED\n")
                time.sleep(600)
    ledger.transaction = transaction
def say(line):  # one write(2) per line: threads' lines never interleave on the pipe
    os.write(1, (line + "\n").encode())
say(f"PROFILE {g.profile_id}")
def call(i):
    with v.authorize(g.token, method="read_file", args={"path": f"f{i}"}, run_id=RUN, wave_id=WAVE,
                     audience=AUD, now=T0 + 5):
        time.sleep(0.001)
    say(f"ANSWERED {i}")
threads = [threading.Thread(target=call, args=(i,)) for i in range(60)]
for t in threads:
    t.start()
for t in threads:
    t.join()
say("ALL")
"""


def _child(ops: Path, mode: str, env_extra: dict) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **env_extra}
    return subprocess.Popen([sys.executable, "-c", CHILD, str(ops), mode], stdout=subprocess.PIPE, text=True,
                            env=env, cwd=REPO_ROOT)


def _after_recovery(ops: Path, profile_id: str, answered: set[int]) -> tuple[int, set[str]]:
    ledger = open_ledger(ops)
    from coordinator.keys import load_keyring
    fresh = GrantVerifier(load_keyring(ops), ledger)
    fresh._ensure_run(RUN)
    charged = {e.payload["args_digest"] for e in ledger.events(RUN)
               if e.topic == "grant.call" and e.payload["profile_id"] == profile_id}
    missing = {i for i in answered if digest_json({"path": f"f{i}"}) not in charged}
    assert not missing, f"answered calls without a durable charge: {sorted(missing)}"
    return fresh.usage(profile_id)["calls_total"], charged


def _read(p: subprocess.Popen, until: str | None = None) -> tuple[str, set[int], list[str]]:
    profile, answered, lines = "", set(), []
    for line in p.stdout:
        lines.append(line)
        if line.startswith("PROFILE"):
            profile = line.split()[1]
        elif line.startswith("ANSWERED"):
            answered.add(int(line.split()[1]))
        if until and line.startswith(until):
            break
    return profile, answered, lines


@pytest.mark.parametrize("k", [1, 7, 30])
def test_a_crash_right_after_a_group_commit_never_loses_an_answered_call(tmp_path: Path, k: int) -> None:
    """The process ends (exit 137, no cleanup) right after the commit holding the k-th charge,
    before that batch's callers are answered: every answered call is charged after recovery,
    and the budget is the charges in the ledger."""
    ops = tmp_path / "ops"
    ops.mkdir()
    p = _child(ops, "crash", {ENV: f"grant.call:{k}"})
    profile, answered, _ = _read(p)
    assert p.wait(60) == EXIT_STATUS
    used, charged = _after_recovery(ops, profile, answered)
    assert used == len(charged) >= k > len(answered) - 1  # the crashing batch's callers got no answer


def test_a_kill_before_the_group_commit_leaves_exactly_the_answered_calls(tmp_path: Path) -> None:
    """kill -9 while a group transaction is open (its charges written, not committed): the
    calls waiting on it were not answered and are not charged; the budget after recovery
    equals the answered calls exactly."""
    ops = tmp_path / "ops"
    ops.mkdir()
    p = _child(ops, "stall", {})
    try:
        profile, answered, lines = _read(p, until="STALLED")
        assert lines and lines[-1].startswith("STALLED")
        time.sleep(0.3)  # let every other call queue behind the stalled commit
        p.send_signal(signal.SIGKILL)
        _, more, _ = _read(p)
        answered |= more
    finally:
        p.kill()
        p.wait(30)
    assert 0 < len(answered) < 60
    used, charged = _after_recovery(ops, profile, answered)
    assert used == len(charged) == len(answered)
