"""Tools in the sandbox: tool folders shown read-only to workers, pre-flight
resolving argv[0] as the sandbox will see it, what COMMAND_NOT_FOUND says, and
real tools' conventions (ok_exit_codes, "no change") - with real bubblewrap."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.executors.base import AttemptFiles, Limits
from coordinator.executors.sandbox import bwrap_argv, probe_bwrap
from coordinator.preflight import ToolDirRefused, ToolNotVisible, check_tool_dirs, prepare
from tests.attacks import attack
from tests.runloop.conftest import cmd_task, run_queue, write_queue

needs_bwrap = pytest.mark.skipif(not probe_bwrap()[0], reason="bubblewrap cannot create namespaces here")


def _tool(root: Path) -> Path:
    """A tool installed in a folder of the user's choice (a virtualenv's layout): bin/stamp."""
    exe = root / "bin" / "stamp"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\necho stamped > stamped.txt\nexit 1\n")  # exits 1 when it changed something
    exe.chmod(0o755)
    return exe


@attack("tool-dir-exposure")
def test_a_tool_folder_that_would_show_keys_the_ledger_or_the_repository_is_refused(tmp_path, git_repo,
                                                                                   ops_root) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (ops_root / "keys").mkdir(parents=True, exist_ok=True)
    check_tool_dirs([str(tools)], git_repo, ops_root)  # a folder of its own is fine
    for bad, why in ((str(ops_root), "OPS_ROOT"), (str(ops_root / "keys"), "OPS_ROOT"),
                     (str(tmp_path), "the repository"), ("/", "the repository"),
                     (str(git_repo / ".git"), "the repository")):
        with pytest.raises(ToolDirRefused) as ei:
            check_tool_dirs([bad], git_repo, ops_root)
        assert ei.value.details["refused_because"] == why and ei.value.details["tool_dir"] == bad
    for bad in ("relative/dir", str(tmp_path / "missing")):
        with pytest.raises(ToolDirRefused) as ei:
            check_tool_dirs([bad], git_repo, ops_root)
        assert bad in ei.value.message
    # a symlink to OPS_ROOT is judged by where it points
    link = tmp_path / "innocent"
    link.symlink_to(ops_root)
    with pytest.raises(ToolDirRefused):
        check_tool_dirs([str(link)], git_repo, ops_root)


def test_tool_folders_are_bound_read_only_at_their_own_paths(tmp_path) -> None:
    files = AttemptFiles(**{f: tmp_path / f for f in ("spawn_json", "scratch", "base_git", "gateway_socket",
                                                       "coordinator_pub", "log_dir")})
    argv = bwrap_argv(files, limits=Limits(tool_dirs=("/opt/tools",)))
    i = argv.index("/opt/tools")
    assert argv[i - 1] == "--ro-bind" and argv[i + 1] == "/opt/tools"
    assert argv[argv.index("DOME_TOOL_DIRS") + 1] == "/opt/tools"
    assert "/opt/tools" not in bwrap_argv(files, limits=Limits())


def test_preflight_refuses_a_program_the_sandbox_would_hide_and_names_the_folder(tmp_path, git_repo) -> None:
    exe = _tool(tmp_path / "venv")
    q = write_queue(tmp_path, git_repo, [cmd_task("t", "")])
    raw = json.loads(q.read_text())
    raw["tasks"][0]["action_spec"]["argv"] = [str(exe), "--fix"]
    q.write_text(json.dumps(raw))
    with pytest.raises(ToolNotVisible) as ei:
        prepare(q)
    assert ei.value.details["tool_dir"] == str(tmp_path / "venv")
    assert f"--tool-dir {tmp_path / 'venv'}" in ei.value.message
    prepare(q, tool_dirs=(str(tmp_path / "venv"),))  # shown: accepted
    prepare(q, sandbox="none")  # no sandbox: nothing is hidden
    raw["tool_dirs"] = [str(tmp_path / "venv")]
    q.write_text(json.dumps(raw))
    assert prepare(q).wq.tool_dirs == (str(tmp_path / "venv"),)


def test_command_not_found_says_what_the_sandbox_shows(monkeypatch) -> None:
    from worker_sdk.intents.command import command_not_found
    monkeypatch.setenv("DOME_TOOL_DIRS", "/opt/a:/opt/b")
    err = command_not_found(["/home/me/venv/bin/ruff", "check"], "/usr/bin:/bin")
    assert err.code == "COMMAND_NOT_FOUND"
    assert err.message.startswith("command not found: /home/me/venv/bin/ruff")
    assert "tool folders /opt/a, /opt/b" in err.message
    assert "--tool-dir /home/me/venv" in err.hints[0]
    err = command_not_found(["nope"], "/usr/bin:/bin")
    assert "PATH /usr/bin:/bin" in err.message and err.details["tool_dirs"] == ["/opt/a", "/opt/b"]


@needs_bwrap
def test_a_tool_in_a_shown_folder_runs_ok_exit_codes_and_no_change_succeed(tmp_path, git_repo, ops_root,
                                                                          ledger_env) -> None:
    exe = _tool(tmp_path / "venv")
    tasks = [cmd_task("stamp", "", outputs=()), cmd_task("nothing", "true", outputs=()),
             cmd_task("must-change", "true", max_attempts=1),
             cmd_task("exit-1", "echo x > x.txt; exit 1", outputs=(), max_attempts=1)]
    tasks[0]["action_spec"] = {"intent": "command", "argv": [str(exe)], "ok_exit_codes": [0, 1]}
    q = write_queue(tmp_path, git_repo, tasks)
    _loop, out = run_queue(q, ops_root, ledger_env, tool_dirs=(str(tmp_path / "venv"),))
    ledger = ledger_env[0]
    done = {e.node_id: e.payload for e in ledger.events(out.run_id)
            if e.topic in ("task.completed", "task.failed")}
    assert done["stamp"]["outcome"] == "succeeded" and done["stamp"]["summary"]["exit_code"] == 1
    assert done["stamp"].get("proposal_id")
    assert done["nothing"]["outcome"] == "succeeded" and done["nothing"]["summary"]["no_change"] is True
    assert done["must-change"]["error"]["code"] == "REQUIRED_OUTPUT_MISSING"
    assert done["exit-1"]["error"]["code"] == "COMMAND_FAILED"  # 1 is not ok unless the task says so
    assert "ok_exit_codes" not in done["exit-1"]["error"]["message"]
