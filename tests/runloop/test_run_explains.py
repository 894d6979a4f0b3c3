"""A run says why it ended as it did, in the words users read, and the CLI keeps
one contract (exit codes, JSON errors, read-only commands create nothing).

Real runs through the real CLI: bubblewrap workers on real git repositories,
a real SQLite ledger."""
from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, dome_cli, git, make_repo
from tests.runloop.conftest import cmd_task, write_queue

DICT_REPR = re.compile(r"\{'[a-z_]+': ")  # what print(dict) looks like


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory) -> dict:
    """Two tasks that fail: one names a command that does not exist, one exits 3
    after writing to stderr. Run from its own folder with a relative --ops-root."""
    base = tmp_path_factory.mktemp("failed")
    repo = make_repo(base / "repo")
    q = write_queue(base, repo, [
        cmd_task("nocmd", "unused"), cmd_task("boom", "echo line1 >&2; echo boom-detail >&2; exit 3")],
        scheduling={"max_parallel": 2, "default_max_attempts": 2, "default_timeout_s": 60})
    raw = json.loads(q.read_text())
    raw["tasks"][0]["action_spec"]["argv"] = ["no-such-command-xyz"]
    q.write_text(json.dumps(raw))
    res = dome_cli("run", str(q), "--ops-root", "ops", cwd=base, timeout=240)
    run_id = re.search(r"run (run-\S+): ", res.stdout).group(1)
    return {"base": base, "repo": repo, "res": res, "run_id": run_id, "ops": base / "ops"}


def run_with_target_moved_midway(base: Path) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """`dome run --json` whose work passes every check, while another party moves
    the target branch (to a commit that is not an ancestor of the base) as
    the task runs: the README's old trap, now met at promotion time.
    Returns the finished process, the repository and the ops root."""
    import time

    from ledger import Ledger
    from registry.errors import DomeError
    from sqlalchemy.exc import SQLAlchemyError

    repo = make_repo(base / "repo")
    git(repo, "checkout", "-q", "-b", "elsewhere")
    (repo / "X").write_text("x\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "elsewhere")
    git(repo, "checkout", "-q", "main")
    q = write_queue(base, repo, [cmd_task("write", "sleep 3; echo a > A.txt")], promote_to="refs/heads/target",
                    scheduling={"max_parallel": 1, "default_max_attempts": 1, "default_timeout_s": 60},
                    validations=[{"suite": "command", "name": "tests", "argv": ["test", "-f", "A.txt"],
                                  "required": True}])
    ops = base / "ops"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "coordinator.cli.main", "run", str(q), "--ops-root", "ops",
                             "--json"], cwd=base, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    moved = False
    while not moved and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
        if not (ops / "dome.db").is_file():
            continue
        try:
            with Ledger.open(None, ops, migrate_schema=False) as led:
                runs = led.run_ids()
                started = bool(runs) and any(e.topic == "task.dispatched" for e in led.events(runs[0]))
        except (SQLAlchemyError, DomeError):  # the run is still creating its ledger
            continue
        if started:
            git(repo, "update-ref", "refs/heads/target", "elsewhere")
            moved = True
    out, err = proc.communicate(timeout=240)
    assert moved, err[-2000:]
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), repo, ops


@pytest.fixture(scope="module")
def blocked_run(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("blocked")
    res, repo, ops = run_with_target_moved_midway(base)
    return {"base": base, "repo": repo, "res": res, "out": json.loads(res.stdout), "ops": ops}


# -- say why, at the end of every run --------------------------------------------------

def test_failed_run_ends_with_each_failed_task_and_its_stderr(failed_run):
    res = failed_run["res"]
    assert res.returncode == 5, res.stderr[-2000:]
    out = res.stdout
    assert f"run {failed_run['run_id']}: failed" in out
    assert "  2 task(s) failed:" in out
    assert "    - boom after 2 attempt(s): COMMAND_FAILED command exited with 3" in out
    assert "        | line1\n        | boom-detail" in out
    # a command that does not exist fails the same way every time: one attempt, not two
    assert "    - nocmd after 1 attempt(s): COMMAND_NOT_FOUND command not found: no-such-command-xyz" in out
    assert not DICT_REPR.search(out + res.stderr), out


def test_deterministic_failure_is_attempted_once_in_the_ledger(failed_run):
    ev = dome_cli("events", failed_run["run_id"], "--ops-root", str(failed_run["ops"]), "--json")
    dispatched = [json.loads(line)["node_id"] for line in ev.stdout.splitlines()
                  if json.loads(line)["topic"] == "task.dispatched"]
    assert sorted(dispatched) == ["boom", "boom", "nocmd"]


def test_status_carries_the_same_reasons(failed_run):
    ops = str(failed_run["ops"])
    text = dome_cli("status", failed_run["run_id"], "--ops-root", ops)
    assert text.returncode == 0
    assert "    - nocmd after 1 attempt(s): COMMAND_NOT_FOUND command not found: no-such-command-xyz" in text.stdout
    assert "        | boom-detail" in text.stdout
    assert not DICT_REPR.search(text.stdout)
    st = json.loads(dome_cli("status", failed_run["run_id"], "--ops-root", ops, "--json").stdout)
    tasks = {t["node_id"]: t for t in st["why"]["failed_tasks"]}
    assert tasks["nocmd"]["code"] == "COMMAND_NOT_FOUND" and tasks["nocmd"]["attempts"] == 1
    assert tasks["boom"]["stderr_tail"] == "line1\nboom-detail"
    assert st["why"]["verdict"][0] == f"run {failed_run['run_id']}: failed"
    assert text.stdout.splitlines()[1:] == st["why"]["verdict"][1:]  # the same words


def test_blocked_run_names_the_moved_target_and_integration_shows_on_stderr(blocked_run):
    res, out = blocked_run["res"], blocked_run["out"]
    assert res.returncode == 4 and out["status"] == "blocked", res.stderr[-2000:]
    problems = {p["link"]: p for p in out["why"]["gate_problems"]}
    assert problems["target:refs/heads/target"]["status"] == "invalid"
    assert "moved since the base" in problems["target:refs/heads/target"]["detail"]
    err = res.stderr
    # the verdict block, on stderr when stdout is JSON
    assert f"run {out['run_id']}: blocked" in err
    assert "  not promoted to refs/heads/target; the gate is missing:" in err
    assert "    - target:refs/heads/target: invalid (moved since the base" in err
    # the live view (plain lines: stderr is not a terminal) covers integration, with --json
    assert "integration write: proposal verified" in err
    assert "integration applied write" in err
    assert "integration validating tests (final) on cp-0001 (1 proposal(s))" in err
    assert "integration final validation tests on 1 proposal(s): passed" in err
    assert "integration gate passed" in err
    assert "integration promotion blocked to refs/heads/target" in err
    assert not DICT_REPR.search(err)


def test_each_integration_decision_is_shown_once(blocked_run):
    """Without a TTY the live view prints one line per integration decision, never two."""
    err = blocked_run["res"].stderr
    lines = [line for line in err.splitlines() if re.match(r"\S+ #\d+ integration ", line)]
    assert any(" integration gate passed" in line for line in lines), err[-2000:]
    assert any(" integration promotion blocked to refs/heads/target" in line for line in lines)
    assert len(lines) == len(set(lines)), [line for line in lines if lines.count(line) > 1]
    # two plans are two decisions: the first, and the one the gate judges (it supersedes the first)
    texts = [line.split(" integration ", 1)[1] for line in lines]
    assert texts.count("stack plan with 1 layer(s)") == 1 and "stack plan revision 2 with 1 layer(s)" in texts


def test_in_run_integration_shows_each_decision_once(git_repo, ops_root, ledger_env, tmp_path):
    """With scheduling.integrate_during_run the canvas writes through the run's writer
    while tasks still run: the view still prints each integration decision once."""
    import io

    from coordinator.runloop.finish import integration_finish
    from coordinator.runloop.view import PlainView
    from tests.runloop.conftest import run_queue

    out = io.StringIO()
    tasks = [cmd_task("first", "echo 1 > one.txt"), cmd_task("second", "echo 2 > two.txt", ["first"])]
    q = write_queue(tmp_path, git_repo, tasks, scheduling={
        "integrate_during_run": True, "integration_batch_size": 1, "max_parallel": 1,
        "rebase_waves_on_integration_head": True, "advance_baseline": {"after_layers": 1}})
    _, res = run_queue(q, ops_root, ledger_env, sandbox="none", finish=integration_finish, view=PlainView(out))
    assert res.status == "promoted", res
    lines = [line for line in out.getvalue().splitlines() if re.match(r"\S+ #\d+ integration ", line)]
    assert any(line.endswith(" integration applied second") for line in lines), out.getvalue()[-2000:]
    assert len(lines) == len(set(lines)), [line for line in lines if lines.count(line) > 1]


def test_run_leaves_nothing_in_the_target_working_tree(blocked_run):
    repo = blocked_run["repo"]
    assert git(repo, "status", "--porcelain", "--ignored") == ""
    assert not (repo / "ops").exists()  # a relative --ops-root is the caller's, never the repo's
    assert len(git(repo, "worktree", "list").splitlines()) == 1


def test_checkpoint_commits_name_the_node_and_the_intent(blocked_run):
    head = f"refs/dome/runs/{blocked_run['out']['run_id']}/head"
    subject = git(blocked_run["repo"], "log", "-1", "--format=%s", head)
    assert re.fullmatch(r"dome: apply write \(command\) pp-[0-9a-f]+", subject), subject


# -- one CLI contract ---------------------------------------------------------------

@pytest.mark.parametrize("argv", [["status"], ["status", "run-x"], ["events", "run-x"], ["report", "run-x"],
                                  ["verify", "run-x"], ["ledger", "verify"]])
def test_read_only_commands_create_nothing_and_exit_2(tmp_path, argv):
    ops = tmp_path / "nowhere"
    res = dome_cli(*argv, "--ops-root", str(ops), "--json", cwd=tmp_path)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert json.loads(res.stdout)["error"]["code"] == "LEDGER_NOT_FOUND"
    assert not ops.exists() and list(tmp_path.iterdir()) == []
    db = tmp_path / "other.db"
    res = dome_cli(*argv, "--db", f"sqlite:///{db}", cwd=tmp_path)
    assert res.returncode == 2 and "LEDGER_NOT_FOUND" in res.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [["status", "run-nope"], ["events", "run-nope"], ["report", "run-nope"],
                                  ["promote", "run-nope", "--consent", "x"], ["run", "--resume", "run-nope"]])
def test_unknown_run_is_bad_input_with_a_json_error(failed_run, argv):
    res = dome_cli(*argv, "--ops-root", str(failed_run["ops"]), "--json")
    assert res.returncode == 2
    err = json.loads(res.stdout)["error"]
    assert err["code"] == "RUN_NOT_FOUND" and "run-nope" in err["message"]


@pytest.mark.parametrize("argv,code", [(["status", "--bogus"], "USAGE"), (["run"], "USAGE"),
                                       (["ledger", "nope"], "USAGE"), (["frobnicate"], "UNKNOWN_COMMAND"),
                                       (["gc", "/nonexistent/repo"], "REPO_NOT_FOUND")])
def test_bad_input_with_json_is_a_json_error_and_exit_2(tmp_path, argv, code):
    res = dome_cli(*argv, "--json", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    err = json.loads(res.stdout)["error"]
    assert err["code"] == code and set(err) == {"code", "message", "details", "hints", "retry"}
    plain = dome_cli(*argv, cwd=tmp_path)
    assert plain.returncode == 2 and plain.stdout == ""


def test_events_into_a_reader_that_stops_early_exits_quietly(failed_run):
    r, w = os.pipe()
    fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ: a small pipe, so dome is still writing when the reader leaves
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "coordinator.cli.main", "events", failed_run["run_id"],
                             "--ops-root", str(failed_run["ops"]), "--json"], stdout=w, stderr=subprocess.PIPE,
                            env=env)
    os.close(w)
    first = os.read(r, 200)
    os.close(r)  # like `head -c 200`
    _, err = proc.communicate(timeout=60)
    assert first.startswith(b"{")
    assert proc.returncode == 0 and err == b"", err.decode()[-1000:]


def test_gc_keeps_the_newest_runs_refs(tmp_path):
    repo = make_repo(tmp_path / "repo")
    head = git(repo, "rev-parse", "HEAD")
    for rid in ("run-20260101T000000-aaaaaa", "run-20260102T000000-bbbbbb", "run-20260103T000000-cccccc"):
        git(repo, "update-ref", f"refs/dome/runs/{rid}/head", head)
        git(repo, "update-ref", f"refs/dome/runs/{rid}/checkpoints/0001", head)
    dry = dome_cli("gc", str(repo), "--keep", "1", "--dry-run")
    assert dry.returncode == 0 and dry.stdout.strip() == "would delete 4 ref(s) of 2 run(s); kept the newest 1 run(s)"
    assert len(git(repo, "for-each-ref", "refs/dome/runs").splitlines()) == 6
    res = json.loads(dome_cli("gc", str(repo), "--keep", "1", "--json").stdout)
    assert res["pruned_runs"] == ["run-20260101T000000-aaaaaa", "run-20260102T000000-bbbbbb"]
    left = git(repo, "for-each-ref", "--format=%(refname)", "refs/dome/runs").splitlines()
    assert left == ["refs/dome/runs/run-20260103T000000-cccccc/checkpoints/0001",
                    "refs/dome/runs/run-20260103T000000-cccccc/head"]
    assert git(repo, "rev-parse", "main") == head


def test_verify_on_a_correctly_blocked_run_says_valid_and_blocked(blocked_run):
    run_id, ops = blocked_run["out"]["run_id"], str(blocked_run["ops"])
    res = dome_cli("verify", run_id, "--ops-root", ops)
    assert res.returncode == 0, res.stdout + res.stderr  # a valid record of a run blocked by design
    lines = res.stdout.splitlines()
    assert lines[0] == f"run {run_id}: the evidence chain is valid and the run is blocked (not promoted)"
    assert re.fullmatch(r"  (\d+)/\1 integrity checks passed", lines[1]), lines
    assert lines[2] == "  blocked because:"
    assert lines[3].startswith("    - target:refs/heads/target: invalid (moved since the base"), lines
    assert "promoted head" not in res.stdout
    js = dome_cli("verify", run_id, "--ops-root", ops, "--json")
    ver = json.loads(js.stdout)
    assert js.returncode == 0 and ver["valid"] is True and ver["status"] == "blocked" and not ver["failures"]
    assert ver["blocked_by"] == [lines[3][len("    - "):]]
    kinds = {c["kind"]: c for c in ver["checks"]}
    assert kinds["block_agrees_with_gate"]["status"] == "ok"
    assert all(c["detail"] == "" for c in ver["checks"] if c["ok"])  # ok never carries "what is missing"


def test_verify_on_a_failed_run_says_valid_and_failed(failed_run):
    """Tasks failed, so nothing was integrated: no promotion decision is expected."""
    res = dome_cli("verify", failed_run["run_id"], "--ops-root", str(failed_run["ops"]))
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == f"run {failed_run['run_id']}: the evidence chain is valid and the run failed (not promoted)"
    assert lines[-1] == "  reason: some nodes failed or were blocked"
    ver = json.loads(dome_cli("verify", failed_run["run_id"], "--ops-root", str(failed_run["ops"]),
                              "--json").stdout)
    assert ver["status"] == "failed" and ver["valid"] is True
    assert "promotion_decision" not in {c["kind"] for c in ver["checks"]}


# -- progress in every phase ------------------------------------------------------

def test_live_view_on_a_50_column_terminal_never_wraps(tmp_path):
    """`dome run` on a real pseudo-terminal 50 columns wide: the redrawn block
    covers integration and no line is wider than the terminal (a wrapped line
    would make the redraw erase the wrong lines)."""
    import pty
    import select
    import struct
    import termios

    repo = make_repo(tmp_path / "repo")
    q = write_queue(tmp_path, repo, [cmd_task("a-task-with-a-rather-long-node-name", "sleep 1; echo a > A.txt")],
                    scheduling={"max_parallel": 1, "default_max_attempts": 1, "default_timeout_s": 60},
                    validations=[{"suite": "command", "name": "tests", "argv": ["test", "-f", "A.txt"]}])
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 50, 0, 0))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("COLUMNS", None)
    proc = subprocess.Popen([sys.executable, "-m", "coordinator.cli.main", "run", str(q), "--ops-root",
                             str(tmp_path / "ops"), "--json"], stdin=slave, stdout=subprocess.PIPE, stderr=slave,
                            env=env, cwd=tmp_path)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        if not ready:
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    out, _ = proc.communicate(timeout=120)
    os.close(master)
    assert json.loads(out)["status"] == "promoted"
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert "\x1b[" in screen  # redrawn in place
    plain = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "\n", screen).replace("\r", "\n")
    lines = [line for line in plain.split("\n") if line.strip()]
    assert max(len(line) for line in lines) <= 50, max(lines, key=len)
    assert any(line.startswith("integration: ") for line in lines)
    assert any("final validation tests" in line for line in lines)


def test_pytest_suite_on_a_read_only_checkout_runs_without_cache_warnings(tmp_path):
    """A `python3 -m pytest` validation (as the examples use) runs on a read-only
    view of the head: pytest must not warn that it cannot write its cache."""
    from coordinator.integration.canvas import Checkpoint
    from coordinator.integration.validation import SuiteRunner

    repo = make_repo(tmp_path / "repo")
    (repo / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a test")
    cp = Checkpoint("cp-0001", 1, git(repo, "rev-parse", "HEAD"), git(repo, "rev-parse", "HEAD^{tree}"), "",
                    ("p",), ("p",))
    seen = {}

    def keep(data: bytes) -> str:
        seen["log"] = data
        return "sha256:" + "0" * 64

    rep = SuiteRunner(repo, put_artifact=keep)(cp, {"suite": "command", "name": "tests",
                                                    "argv": ["python3", "-m", "pytest", "-q", "-rw"]})
    assert rep["result"] == "passed", rep.get("summary")
    log = seen["log"].decode("utf-8", "replace")
    assert "1 passed" in log and "warning" not in log.lower() and "cache" not in log.lower(), log[-1500:]


@pytest.mark.parametrize("argv", [["status"], ["events", "run-x"], ["report", "run-x"], ["verify", "run-x"]])
def test_a_file_that_is_not_a_ledger_is_a_typed_error_exit_3(tmp_path, argv):
    ops = tmp_path / "ops"
    ops.mkdir()
    (ops / "dome.db").write_bytes(b"not a database" * 300)
    res = dome_cli(*argv, "--ops-root", str(ops), "--json")
    assert res.returncode == 3
    assert json.loads(res.stdout)["error"]["code"] == "LEDGER_UNAVAILABLE"
    assert sorted(p.name for p in ops.iterdir()) == ["dome.db"]
