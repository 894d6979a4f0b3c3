"""The wheel carries the product and nothing that only tests use: the test-only MCP
tools (`worker_sdk/testing/`, `coordinator/mcp/testing/`) and the tests stay in the
source tree. Built from a copy of the tracked sources, so the checkout stays clean."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

PACKAGES = ("registry", "ledger", "coordinator", "worker_sdk")


@pytest.mark.slow
def test_the_wheel_ships_the_product_without_test_only_modules(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO_ROOT / name, src / name)
    for pkg in PACKAGES:
        shutil.copytree(REPO_ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path / "wheel"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           str(src), "-w", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = out.glob("dome-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert not sorted(n for n in names if "/testing/" in n or n.startswith("tests/"))
    for shipped in ("coordinator/integration/gate.py", "coordinator/cli/main.py", "ledger/protocols.py",
                    "registry/schemas/work_queue.json", "worker_sdk/mcp_worker.py"):
        assert shipped in names, shipped
