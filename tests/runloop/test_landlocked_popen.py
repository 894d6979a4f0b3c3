"""The command intent's Landlock goes on a short-lived thread that starts the command: the command
may write only beneath its writable folders, and the runtime that started it is not restricted."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from worker_sdk import landlock
from worker_sdk.intents.command import landlocked_popen


def test_the_command_is_confined_and_the_runtime_is_not(tmp_path: Path) -> None:
    if landlock.available() == 0:
        pytest.fail("this kernel has no Landlock: the worker's second layer is not there to test")
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    script = f"echo in > {inside}/f; echo out > {outside}/f; exit 0"
    proc = landlocked_popen(["sh", "-c", script], [str(inside)], (), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=30)
    assert (inside / "f").read_text() == "in\n"
    assert not (outside / "f").exists() and b"ermission denied" in err
    (outside / "g").write_text("the runtime still writes here\n")  # this thread carries no ruleset
    again = subprocess.run(["sh", "-c", f"echo x > {outside}/h"], timeout=30)
    assert again.returncode == 0 and (outside / "h").exists()  # nor does what it starts without one


def test_a_start_that_fails_raises_on_the_callers_thread(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        landlocked_popen([str(tmp_path / "no-such-program")], [str(tmp_path)], ())
