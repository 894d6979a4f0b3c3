"""An attempt's files on the host: few (for the local executor one log; its spawn spec, task facts
and key are in memory), the key 0600 and readable by its own sandbox only, and placed under
$DOME_SCRATCH_DIR when that is set (a tmpfs keeps unsandboxed checkouts off the disk)."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from coordinator.executors.attempts import WORKER_LOG, close_fds, fd_of, log_tail, scratch_root, write_attempt
from coordinator.executors.base import Limits
from coordinator import runstate as rs
from registry.signing import SigningKey
from tests.conftest import dome_cli
from tests.runloop.conftest import cmd_task, run_queue, write_queue
from tests.runloop.test_sandbox import needs_bwrap


def test_an_attempt_is_one_directory_and_three_files_the_key_0600(tmp_path: Path) -> None:
    key = SigningKey.generate()
    spec = {"node_execution_id": "ne-0123456789abcdef", "run_id": "r"}
    files = write_attempt(tmp_path, spec, key, {"required_outputs": ["patch_proposal"]}, Limits())
    adir = tmp_path / "attempts" / "ne-0123456789abcdef"
    assert sorted(p.name for p in adir.iterdir()) == ["spawn.json", "task.json", "worker.key"]
    assert files.worker_key == adir / "worker.key" and files.worker_key.stat().st_mode & 0o777 == 0o600
    assert files.worker_key.read_text().split()[0] == key.kid
    assert files.log_dir == adir and not files.scratch.exists()  # the worker makes its own scratch
    with pytest.raises(FileExistsError):  # created exclusively: never a file someone planted
        write_attempt(tmp_path, spec, key, {}, Limits())


def test_the_local_executors_attempt_files_are_in_memory_the_key_0600(tmp_path: Path) -> None:
    key = SigningKey.generate()
    spec = {"node_execution_id": "ne-00000000000000aa", "run_id": "r"}
    files = write_attempt(tmp_path, spec, key, {"required_outputs": ["patch_proposal"]}, Limits(), in_memory=True)
    try:
        assert list(tmp_path.iterdir()) == []  # nothing on disk: not the spec, the facts or the key
        assert [fd_of(p) for p in (files.spawn_json, files.task_json, files.worker_key)] == list(files.fds)
        spawn_fd, task_fd, key_fd = files.fds
        assert json.loads(files.spawn_json.read_text()) == spec
        assert json.loads(files.task_json.read_text())["required_outputs"] == ["patch_proposal"]
        assert files.worker_key.read_text().split()[0] == key.kid
        assert os.fstat(key_fd).st_mode & 0o777 == 0o600 and os.fstat(spawn_fd).st_mode & 0o777 == 0o644
        for fd in files.fds:  # never inherited by a process they are not passed to
            assert not os.get_inheritable(fd)
        assert files.log_file == tmp_path / "attempts" / "ne-00000000000000aa.log"
    finally:
        close_fds(files)
    for fd in files.fds:
        with pytest.raises(OSError):
            os.fstat(fd)
    assert fd_of(tmp_path / "spawn.json") is None


def test_the_log_tail_is_the_end_of_the_one_log(tmp_path: Path) -> None:
    assert log_tail(tmp_path / WORKER_LOG, 10) == ""
    (tmp_path / WORKER_LOG).write_bytes(b"x" * 5000 + b"\n{\"dome_worker_error\": 1}\n")
    assert log_tail(tmp_path / WORKER_LOG, 26) == "\n{\"dome_worker_error\": 1}\n"


def test_scratch_dir_setting_is_checked_before_any_work(git_repo: Path, ops_root: Path, ledger_env, tmp_path: Path,
                                                        monkeypatch) -> None:
    from coordinator.executors.base import ScratchDirInvalid
    from coordinator.preflight import prepare

    q = write_queue(tmp_path, git_repo, [cmd_task("a", "echo a > a.txt")])
    for bad in (str(tmp_path / "missing"), "relative/dir", str(q)):
        monkeypatch.setenv("DOME_SCRATCH_DIR", bad)
        with pytest.raises(ScratchDirInvalid) as err:
            prepare(q)
        assert err.value.code == "SCRATCH_DIR_INVALID" and bad in err.value.message
    assert ledger_env[0].run_ids() == []
    # the CLI: bad input (exit 2), refused before the ops root is created
    r = dome_cli("run", str(q), "--sandbox", "none", "--ops-root", str(tmp_path / "fresh-ops"), "--json",
                 env={"DOME_SCRATCH_DIR": str(tmp_path / "missing")}, timeout=120)
    assert r.returncode == 2 and "SCRATCH_DIR_INVALID" in r.stdout, (r.stdout, r.stderr[-2000:])
    assert not (tmp_path / "fresh-ops").exists()
    monkeypatch.delenv("DOME_SCRATCH_DIR")
    assert scratch_root() == Path(tempfile.gettempdir())


@pytest.mark.slow
def test_a_run_keeps_its_attempts_under_the_scratch_dir(git_repo: Path, ops_root: Path, ledger_env, tmp_path: Path,
                                                        monkeypatch) -> None:
    scratch = tmp_path / "scratch-root"
    scratch.mkdir()
    monkeypatch.setenv("DOME_SCRATCH_DIR", str(scratch))
    tasks = [cmd_task(f"t{i}", f"echo {i} > f{i}.txt; pwd") for i in range(2)]
    q = write_queue(tmp_path, git_repo, tasks, scheduling={"max_parallel": 2, "endgame_max_duplicates": 0})
    loop, out = run_queue(q, ops_root, ledger_env, sandbox="none")
    assert out.status in ("completed", "promoted"), out
    assert loop.work.parent == scratch and not loop.work.exists()  # there while it ran, gone after
    done = [e for e in ledger_env[0].events(out.run_id) if e.topic == rs.TASK_COMPLETED]
    assert len(done) == 2
    for e in done:  # each checkout was under the scratch dir
        assert e.payload["summary"]["stdout_tail"].startswith(str(scratch) + "/dome-run-")
    assert list(scratch.iterdir()) == []


SNOOP = ("echo \"$DOME_NODE_ID\" > \"$DOME_NODE_ID.txt\"; "
         "seen=$(find / \\( -path /proc -o -path /sys -o -path /usr -o -path /dev \\) -prune -o "
         "\\( -name worker.key -o -name 'dome-run-*' \\) -print 2>/dev/null | sort | tr '\\n' ' '); "
         "echo \"$seen|$(stat -L -c %a /dome/worker.key)|$(cut -d' ' -f1 /dome/worker.key)\"")


@needs_bwrap
@pytest.mark.slow
def test_a_sandboxed_attempt_sees_only_its_own_key(git_repo: Path, ops_root: Path, ledger_env, tmp_path: Path) -> None:
    """Attack: two attempts run side by side, each looking for every worker key and run directory
    it can reach. Each finds one key, its own (read-only, 0400), and none of the host's run folders."""
    ledger = ledger_env[0]
    tasks = [cmd_task(f"snoop{i}", "sleep 0.5; " + SNOOP, max_attempts=1) for i in range(2)]
    q = write_queue(tmp_path, git_repo, tasks, scheduling={"max_parallel": 2, "endgame_max_duplicates": 0})
    loop, out = run_queue(q, ops_root, ledger_env, sandbox="bwrap")
    assert out.status in ("completed", "promoted"), out
    ev = ledger.events(out.run_id)
    kid_of = {e.node_execution_id: e.payload["profile"]["cnf"]["kid"] for e in ev if e.topic == "grant.issued"}
    done = [e for e in ev if e.topic == rs.TASK_COMPLETED]
    assert len(done) == 2 and len(set(kid_of.values())) == 2
    for e in done:
        seen, mode, kid = e.payload["summary"]["stdout_tail"].strip().split("|")
        assert seen.split() == ["/dome/worker.key"], seen
        assert mode == "400" and kid == kid_of[e.node_execution_id]
    assert not loop.work.exists() and not list(ops_root.rglob("worker.key"))
