"""A throwaway PostgreSQL server for tests (skipped where none can be made)."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest


def _run_as_postgres(*cmd: str) -> subprocess.CompletedProcess:
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    return subprocess.run([*prefix, *cmd], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="session")
def pg_url():
    """postgresql+psycopg URL of a fresh cluster on a Unix socket, or skip."""
    pytest.importorskip("psycopg")
    import glob
    debian = ":".join(sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True))  # Debian keeps them off PATH
    path = os.pathsep.join(p for p in (os.environ.get("PATH", ""), debian) if p)
    initdb, pg_ctl = shutil.which("initdb", path=path), shutil.which("pg_ctl", path=path)
    if not initdb or not pg_ctl:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not installed")
    if os.geteuid() == 0 and not shutil.which("runuser"):
        pytest.skip("running as root without runuser: cannot start PostgreSQL")
    base = Path(tempfile.mkdtemp(prefix="dome-pg-"))
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
        shutil.chown(sock, "postgres")
    made = _run_as_postgres(initdb, "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
    if made.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"initdb failed: {made.stderr[-300:]}")
    started = _run_as_postgres(pg_ctl, "-D", str(data), "-w", "-l", str(base / "log"), "-o",
                               f"-k {sock} -c listen_addresses='' -c fsync=off", "start")
    if started.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"PostgreSQL did not start: {started.stderr[-300:]}")
    try:
        yield f"postgresql+psycopg://postgres@/postgres?host={sock}"
    finally:
        _run_as_postgres(pg_ctl, "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(base, ignore_errors=True)
