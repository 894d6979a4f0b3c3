"""Processes the observe tests start: `dome serve` and `dome run`, each bounded in time."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tests.conftest import REPO_ROOT

TOKEN = "test-serve-token-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return {**base, "PYTHONPATH": str(REPO_ROOT), **extra}


def get(url: str, token: str | None = TOKEN, timeout: float = 10) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_until(check, timeout: float, what: str, step: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what}")


@contextmanager
def dome_serve(ops_root: Path) -> Iterator[str]:
    """`dome serve` on a free loopback port over OPS_ROOT's ledger (created here when the test
    has none yet: `dome serve` itself never creates one); yields its base URL; stopped on exit."""
    from ledger import Ledger
    Ledger.open(None, ops_root).close()
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "coordinator.cli.main", "serve", "--ops-root", str(ops_root),
                             "--bind", f"127.0.0.1:{port}"], env=env(DOME_SERVE_TOKEN=TOKEN), cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            if proc.poll() is not None:
                raise AssertionError(proc.stderr.read().decode()[-2000:])
            try:
                return get(url + "/runs.json")[0] == 200
            except OSError:
                return False
        wait_until(up, 60, "dome serve")
        yield url
    finally:
        stop(proc)


def stop(proc: subprocess.Popen, grace: float = 10) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def start_run(queue: Path, ops_root: Path, **extra_env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "coordinator.cli.main", "run", str(queue), "--ops-root",
                             str(ops_root), "--sandbox", "none", "--json"], env=env(**extra_env), cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
