"""One contract for every `dome` command: the global options before or after the command (litho
included), a typed error for every failure (a JSON object under --json, a code in plain text too),
the documented exit codes, and nothing written before a refusal."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from coordinator.cli.litho_cmd import engine_argv
from coordinator.cli.main import split_global_options
from ledger import Ledger
from tests.conftest import dome_cli
from tests.runloop.conftest import cmd_task, write_queue


@pytest.fixture
def ops(tmp_path: Path) -> Path:
    """An ops root whose ledger holds one run, run-x."""
    root = tmp_path / "ops"
    with Ledger.open(None, root) as led:
        led.append("run-x", "run.started", {"seed": 1})
    return root


def test_global_options_split_off_before_the_command():
    assert split_global_options(["--ops-root", "D", "--json", "run", "q.json"]) == (
        {"ops_root": "D", "json": True}, ["run", "q.json"])
    assert split_global_options(["--db=sqlite:///x.db", "status", "--json"]) == (
        {"db": "sqlite:///x.db"}, ["status", "--json"])
    assert split_global_options(["status", "--ops-root", "D"]) == ({}, ["status", "--ops-root", "D"])
    for bad in (["--bogus", "run"], ["--ops-root"], ["--json=yes", "run"]):
        with pytest.raises(ValueError):
            split_global_options(bad)


@pytest.mark.parametrize("before", [True, False])
def test_options_before_or_after_the_command_mean_the_same(ops, tmp_path, before):
    opts = ["--ops-root", str(ops), "--json"]
    argv = [*opts, "status"] if before else ["status", *opts]
    res = dome_cli(*argv, cwd=tmp_path, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "run-x" in res.stdout and json.loads(res.stdout)
    db = dome_cli("--db", f"sqlite:///{ops / 'dome.db'}", "events", "run-x", "--json", cwd=tmp_path, timeout=60)
    assert db.returncode == 0 and json.loads(db.stdout.splitlines()[0])["run_id"] == "run-x", db.stderr


@pytest.mark.parametrize("argv", [["frob"], ["--bogus", "status"], ["status", "--bogus"]])
def test_every_cli_error_has_a_code_plain_or_json(tmp_path, argv):
    code = "UNKNOWN_COMMAND" if argv == ["frob"] else "USAGE"
    plain = dome_cli(*argv, cwd=tmp_path, timeout=60)
    assert plain.returncode == 2 and plain.stdout == "" and f": {code}: " in plain.stderr, plain.stderr
    res = dome_cli(*argv, "--json", cwd=tmp_path, timeout=60)
    assert res.returncode == 2 and json.loads(res.stdout)["error"]["code"] == code, res.stdout + res.stderr


def test_litho_takes_the_global_options_and_answers_bad_flags_in_json(tmp_path):
    assert engine_argv(["eval", "--layout", "a.oas", "--ops-root", "o", "--db=sqlite://"], as_json=True) == [
        "eval", "--json", "--layout", "a.oas"]
    assert engine_argv(["eval", "--json"], as_json=True) == ["eval", "--json"]
    assert engine_argv([], as_json=False) == ["--help"]
    for argv in (["litho", "eval", "--bogus", "--json"], ["--json", "--ops-root", "o", "litho", "frob"]):
        res = dome_cli(*argv, cwd=tmp_path, timeout=120)
        assert res.returncode == 2, res.stdout + res.stderr
        err = json.loads(res.stdout)["error"]
        assert err["code"] == "USAGE", err


def test_mcp_refusal_is_a_json_error_under_json(tmp_path):
    cwd = tmp_path / "cwd"  # the read root (the working directory) must not hold the ops root
    cwd.mkdir()
    res = dome_cli("mcp", "--http", "0.0.0.0:1", "--no-auth", "--json", "--ops-root", str(tmp_path / "o"),
                   cwd=cwd, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    err = json.loads(res.stdout)["error"]
    assert err["code"] == "USAGE" and "loopback" in err["message"]


def test_verify_of_an_unknown_run_is_bad_input(ops, tmp_path):
    res = dome_cli("verify", "run-nope", "--ops-root", str(ops), "--json", cwd=tmp_path, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert json.loads(res.stdout)["error"]["code"] == "RUN_NOT_FOUND"
    plain = dome_cli("verify", "run-nope", "--ops-root", str(ops), cwd=tmp_path, timeout=60)
    assert plain.returncode == 2 and "RUN_NOT_FOUND" in plain.stderr


def _path_without(tmp_path: Path, *keep: str) -> str:
    """A PATH holding only `keep` (git for pre-flight): no bwrap, no podman."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in keep:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    return str(bin_dir)


@pytest.mark.parametrize("executor,code", [("local", "SANDBOX_UNAVAILABLE"), ("container", "CONTAINER_UNAVAILABLE")])
def test_a_host_that_cannot_run_the_attempts_leaves_nothing_behind(git_repo, tmp_path, executor, code):
    q = write_queue(tmp_path, git_repo, [cmd_task("one", "echo 1 > one.txt")])
    ops = tmp_path / "ops"
    env = {"PATH": _path_without(tmp_path, "git"), "DOME_WORKER_IMAGE": ""}
    res = dome_cli("run", str(q), "--ops-root", str(ops), "--executor", executor, "--json", env=env,
                   cwd=tmp_path, timeout=120)
    assert res.returncode == 3, res.stdout + res.stderr
    assert json.loads(res.stdout)["error"]["code"] == code
    assert not ops.exists()  # no ledger, no keys, no copy of the queue
