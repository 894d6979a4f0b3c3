"""Executors grant each worker its share of the CPUs as $DOME_WORKER_CPUS, and the litho
engine sizes its thread pool from it (a worker that takes every core of a shared machine
makes every worker slower)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from coordinator.executors.base import AttemptFiles
from coordinator.executors.sandbox import bwrap_argv, cpus_per_worker, direct_env, probe_bwrap


def _files(tmp_path: Path) -> AttemptFiles:
    for d in ("scratch", "base.git", "logs"):
        (tmp_path / d).mkdir()
    (tmp_path / "spawn.json").write_text("{}")
    (tmp_path / "coordinator.pub").write_text("")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "gw.sock"))
    sock.close()
    return AttemptFiles(tmp_path / "spawn.json", tmp_path / "scratch", tmp_path / "base.git", tmp_path / "gw.sock",
                        tmp_path / "coordinator.pub", tmp_path / "logs")


def test_cores_are_shared_out_between_concurrent_workers():
    cores = len(os.sched_getaffinity(0))
    assert cpus_per_worker(1) == cores
    assert cpus_per_worker(cores) == 1
    assert cpus_per_worker(4 * cores) == 1  # never zero
    assert cpus_per_worker(0) == cores


def test_a_sandboxed_worker_sees_its_grant_and_the_engine_uses_it(tmp_path):
    ok, bwrap = probe_bwrap()
    assert ok, bwrap
    files = _files(tmp_path)
    argv = bwrap_argv(files, bwrap=bwrap, cpus=1)
    probe = "from worker_sdk.litho.threads import choose_threads; print(choose_threads())"
    cmd = argv[:argv.index("--") + 1] + [sys.executable, "-s", "-c", probe]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1"
    assert "DOME_WORKER_CPUS" not in bwrap_argv(files, bwrap=bwrap)  # no grant, no variable
    assert direct_env(files, cpus=3)["DOME_WORKER_CPUS"] == "3"
