"""Pre-flight's edges: which script a command task runs (its working folder, never outside
the checkout), a root script present in the base passing beside one that is missing, and
the hints for each suite the policy needs and the queue lacks."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.preflight import PreflightError, ToolNotVisible, prepare, script_of
from tests.conftest import git
from tests.runloop.conftest import cmd_task, write_queue


def test_script_of_joins_the_working_folder_and_never_leaves_the_checkout() -> None:
    assert script_of({"argv": ["./gen.sh", "x"]}) == "gen.sh"
    assert script_of({"argv": ["./gen.sh"], "params": {"cwd": "tools"}}) == "tools/gen.sh"
    assert script_of({"argv": ["./gen.sh"], "cwd": "sub"}) == "sub/gen.sh"
    assert script_of({"argv": ["python3", "agent.py"], "params": {"cwd": "tools"}}) == "tools/agent.py"
    for outside in ({"argv": ["../gen.sh"]}, {"argv": ["./gen.sh"], "cwd": "../elsewhere"},
                    {"argv": ["sh", "a/../../gen.sh"]}):
        assert script_of(outside) is None, outside  # not in the checkout: nothing to look up in the base
    assert script_of({"argv": ["/usr/bin/env", "x"]}) is None and script_of({"argv": []}) is None


def test_a_root_script_in_the_base_passes_and_only_the_missing_one_is_named(tmp_path: Path, git_repo: Path) -> None:
    (git_repo / "tools").mkdir()
    (git_repo / "tools" / "gen.sh").write_text("#!/bin/sh\necho gen > g.txt\n")
    git(git_repo, "add", "tools/gen.sh")
    git(git_repo, "commit", "-q", "-m", "a script")
    present = {**cmd_task("a", ""), "action_spec": {"intent": "command", "argv": ["./tools/gen.sh"]}}
    assert prepare(write_queue(tmp_path, git_repo, [present])).base_sha == git(git_repo, "rev-parse", "main")
    missing = {**cmd_task("b", ""), "action_spec": {"intent": "command", "argv": ["./tools/gone.sh"]}}
    with pytest.raises(PreflightError) as info:
        prepare(write_queue(tmp_path, git_repo, [present, missing]))
    assert info.value.code == "SCRIPT_NOT_FOUND"
    assert [m["script"] for m in info.value.details["missing"]] == ["tools/gone.sh"]


def test_each_missing_suite_gets_its_own_hint(tmp_path: Path, git_repo: Path) -> None:
    """The `tests` suite is a command the queue must spell out (the hint shows one); another
    suite is named with its params to add."""
    q = write_queue(tmp_path, git_repo, [{**cmd_task("a", "echo a > a.txt"), "risk": "medium"}],
                    validations=[], domain="eda")
    with pytest.raises(PreflightError) as info:
        prepare(q)
    err = info.value
    assert err.code == "SUITE_NOT_DEFINED" and err.details["missing"] == ["drc", "tests"]
    assert err.hints[0] == "add a 'drc' validation with its params"
    assert json.dumps({"suite": "command", "name": "tests"})[:-1] in err.hints[1]


def test_every_task_is_checked_past_one_the_check_skips(tmp_path: Path, git_repo: Path) -> None:
    """Tasks a check does not judge (a dependent task's script, another intent's program, a
    program in the checkout) never end the check: a later task is still judged."""
    (git_repo / "tools").mkdir()
    (git_repo / "tools" / "gen.sh").write_text("#!/bin/sh\necho gen > g.txt\n")
    git(git_repo, "add", "tools/gen.sh")
    git(git_repo, "commit", "-q", "-m", "a script")

    def runs(nid: str, *argv: str, deps: tuple[str, ...] = ()) -> dict:
        return {**cmd_task(nid, "", deps=deps), "action_spec": {"intent": "command", "argv": list(argv)}}

    # scripts: the dependent task "a" (its base may be another task's work) sorts before the root "b"
    with pytest.raises(PreflightError) as info:
        prepare(write_queue(tmp_path, git_repo, [runs("a", "./tools/later.sh", deps=("b",)),
                                                 runs("b", "./tools/gone.sh")]))
    assert info.value.code == "SCRIPT_NOT_FOUND"
    assert [m["script"] for m in info.value.details["missing"]] == ["tools/gone.sh"]
    # programs: another intent ("a") and a script of the checkout ("b") sort before the hidden program ("c")
    exe = tmp_path / "venv" / "bin" / "stamp"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    evaluate = {"node_id": "a", "containers": [], "dependencies": [], "required_capabilities": ["write"],
                "required_outputs": [], "action_spec": {"intent": "litho.evaluate", "params": {"layout": "l.oas"}}}
    with pytest.raises(ToolNotVisible) as shown:
        prepare(write_queue(tmp_path, git_repo, [evaluate, runs("b", "./tools/gen.sh"), runs("c", str(exe))]))
    assert shown.value.details["node_id"] == "c"
